"""The benchmark corpus: fixed, versioned utterances the load clients cycle through and the checks compare.

A corpus file is JSON: ``{"name", "version", "description", "utterances": [{"id", "size", "voice", "text"}]}``.
The default (``study16-v2.json``) was written for this project with the published study's shape; any other
file with the same fields is accepted (``python -m bench run --corpus FILE``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Size = Literal["short", "medium", "long"]
SIZES: tuple[Size, ...] = ("short", "medium", "long")
DEFAULT = Path(__file__).with_name("study16-v2.json")


@dataclass(frozen=True)
class Utterance:
    """One text the clients send."""

    id: str
    """Stable label (``s1``, ``m3``, ``l2``)."""
    size: Size
    """Length class, as the study groups its utterances."""
    voice: str
    """Voice the request names."""
    text: str
    """What is spoken."""


@dataclass(frozen=True)
class Corpus:
    """A named, versioned list of utterances, with the digest of the file it came from."""

    name: str
    version: int
    utterances: tuple[Utterance, ...]
    sha256: str
    """Digest of the file's bytes: two runs used the same corpus exactly when the digests match."""
    path: str
    """Where it was read from."""

    def subset(self, ids: Sequence[str]) -> Corpus:
        """The utterances named in ``ids``, in corpus order (quick mode uses a few)."""
        wanted = set(ids)
        unknown = wanted - {u.id for u in self.utterances}
        if unknown:
            raise ValueError(f"corpus {self.name} has no utterance {sorted(unknown)}")
        kept = tuple(u for u in self.utterances if u.id in wanted)
        return Corpus(self.name + "-subset", self.version, kept, self.sha256, self.path)

    def with_voice(self, voice: str) -> Corpus:
        """The same texts, every one in ``voice`` (a peer comparison speaks one voice that every server offers)."""
        if not voice:
            return self
        kept = tuple(dataclasses.replace(u, voice=voice) for u in self.utterances)
        return Corpus(f"{self.name}-{voice}", self.version, kept, self.sha256, self.path)

    def shortest(self) -> Utterance:
        """The short request used for cold starts and first audio after a release."""
        return min(self.utterances, key=lambda u: len(u.text))

    def counts(self) -> dict[str, int]:
        return {size: sum(1 for u in self.utterances if u.size == size) for size in SIZES}


def load(path: Path = DEFAULT) -> Corpus:
    """Read and check a corpus file; a malformed file fails here with its name, not mid-run."""
    raw = path.read_bytes()
    data = json.loads(raw)
    utterances: list[Utterance] = []
    for i, item in enumerate(data.get("utterances", [])):
        size = item.get("size", "short")
        if size not in SIZES:
            raise ValueError(f"{path}: utterance {i} has size {size!r}, expected one of {SIZES}")
        text = str(item["text"]).strip()
        if not text:
            raise ValueError(f"{path}: utterance {i} is empty")
        utterances.append(Utterance(id=str(item.get("id", f"u{i}")), size=size,
                                    voice=str(item.get("voice", "af_heart")), text=text))
    if not utterances:
        raise ValueError(f"{path}: no utterances")
    if len({u.id for u in utterances}) != len(utterances):
        raise ValueError(f"{path}: utterance ids are not unique")
    return Corpus(name=str(data.get("name", path.stem)), version=int(data.get("version", 0)),
                  utterances=tuple(utterances), sha256=hashlib.sha256(raw).hexdigest(), path=str(path))
