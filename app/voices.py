"""Voice styles: loading a voices file, OpenAI's voice names, and blends in Kokoro-FastAPI's syntax.

The 54 official Kokoro-82M v1.0 voices ship in the package (`EMBEDDED`, checked against its sha256 at load);
``TTS_VOICES_PATH`` names another file. A voices file is an ``.npz`` archive (the official ``voices-v1.0.bin``
is one too) mapping a name to a (510, 1, 256) array: row n-1 is the style for an input of n tokens.
A voice expression is ``name``, ``a+b`` (equal weights), ``a(2)+b(1)`` or ``a(2)-b(1)``: ``b`` subtracted, its
weight counting negative. The sum is divided by the sum of the *positive* weights, so ``a+b`` is the mean of the
two, ``a(2)+b(1)`` two thirds of ``a`` and one of ``b``, and ``a-b`` is ``a - b`` (the difference of two voices,
as Kokoro-FastAPI's users write it). Names are plain identifiers, never paths: nothing a request names is
opened. A name may be an alias (OpenAI's ``alloy``, ``onyx``...) that stands for an installed voice or blend
(see `ALIASES`). A blend speaks its first voice's language (`app.text.languages.of_voice`).
"""

from __future__ import annotations

import hashlib
import re
import threading
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.errors import InvalidInput
from app.text import languages

EMBEDDED = Path(__file__).resolve().parent / "data" / "voices-v1.0.npz"
"""The official voices, as ``NOTICE`` describes them."""
EMBEDDED_SHA256 = "926e332a31864a1cf67b11ea148eb6704f1f5a0370321f844687ab17639ff40b"
DEFAULT_VOICE = "af_heart"
"""Kokoro's own default and its best-rated voice; where a voices file lacks it, its first voice."""

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
}
"""Built-in alias tables; `VoiceBank.load` takes the first whose every voice the file holds (the official voices'
for the embedded file and ``voices-v1.0.bin``; none for a file without them)."""


class _Archive(Mapping[str, npt.NDArray[np.float32]]):
    """The styles of an ``.npz`` file, each read on first use and kept: a server that speaks with a few of the 54
    voices holds those (0.5 MB each), not 28 MB. Shapes come from the arrays' headers, without reading them."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._loaded: dict[str, npt.NDArray[np.float32]] = {}
        self._lock = threading.Lock()
        self.shapes: dict[str, tuple[int, ...]] = {}
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                with archive.open(member) as handle:
                    version = np.lib.format.read_magic(handle)
                    header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                              else np.lib.format.read_array_header_2_0)
                    shape, _, _ = header(handle)
                self.shapes[member[:-4]] = tuple(shape)

    def __getitem__(self, name: str) -> npt.NDArray[np.float32]:
        with self._lock:
            found = self._loaded.get(name)
            if found is None:
                if name not in self.shapes:
                    raise KeyError(name)
                with np.load(self._path) as archive:
                    found = self._loaded[name] = np.asarray(archive[name], dtype=np.float32)
            return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)


class VoiceBank:
    """The styles of one voices file (each read on first use) and the aliases that name them."""

    def __init__(self, styles: Mapping[str, npt.NDArray[np.float32]],
                 aliases: Mapping[str, str] | None = None) -> None:
        if not styles:
            raise ValueError("the voices file holds no voice")
        for name in styles:
            shape = styles.shapes[name] if isinstance(styles, _Archive) else styles[name].shape
            if len(shape) != 3 or shape[1:] != (1, 256):
                raise ValueError(f"voice {name!r} has shape {shape}, expected (N, 1, 256)")
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
        """Read ``path``, or the embedded voices when ``path`` is None (their sha256 checked first). Raises
        ValueError, with what is wrong, for a file that is missing, corrupt or not a voices file.

        ``aliases`` are added to (and override) the built-in table that fits the file, if one does.
        """
        source = EMBEDDED if path is None else path
        if path is None:
            digest = hashlib.sha256(EMBEDDED.read_bytes()).hexdigest()
            if digest != EMBEDDED_SHA256:
                raise ValueError(f"the embedded voices file {EMBEDDED} is corrupt (sha256 {digest[:12]}..., expected "
                                 f"{EMBEDDED_SHA256[:12]}...): reinstall the package")
        try:
            styles = _Archive(source)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"cannot read voices from {source}: {exc}") from None
        return cls(styles, {**builtin_aliases(set(styles)), **(aliases or {})})

    @property
    def names(self) -> list[str]:
        """Installed voices, by language in Kokoro's order, `DEFAULT_VOICE` first in its own, then by name."""
        order = list(languages.LANGUAGES)
        return sorted(self._styles, key=lambda n: (order.index(lang.code) if (lang := languages.of_voice(n)) else
                                                   len(order), n != DEFAULT_VOICE, n))

    @property
    def default(self) -> str:
        """`DEFAULT_VOICE` where installed, else the first voice."""
        return DEFAULT_VOICE if DEFAULT_VOICE in self._styles else self.names[0]

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
        style: npt.NDArray[np.float64] | None = None
        added = 0.0
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
            style = weight * part if style is None else style + weight * part
            added += max(weight, 0.0)
        if added <= 0 or style is None:
            raise InvalidInput(f"voice {expression[:80]!r} only subtracts: start with a voice to subtract from "
                               "('a-b')", param="voice")
        return list(dict.fromkeys(names)), (style / added).astype(np.float32)


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
    def language(self) -> languages.Language | None:
        """The language its (first) voice's name says; None for a name that says none."""
        return languages.of_voice(self.name)

    def style_for(self, n_tokens: int) -> npt.NDArray[np.float32]:
        """The (1, 256) style for an input of ``n_tokens`` tokens."""
        row = min(max(n_tokens, 1), len(self._style)) - 1
        found: npt.NDArray[np.float32] = self._style[row]
        return found
