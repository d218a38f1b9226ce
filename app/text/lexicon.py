"""misaki's pronunciation lexicon, held in two memory-mapped tries instead of Python dicts.

misaki loads its gold and silver lexicons from JSON into dicts: 365,000 entries, about 60 MB of
Python objects and 0.45 s per load. The same entries in a MARISA trie (`marisa-trie`) take
2.6 MB of file, mapped read-only (clean page cache, not heap), and open in under a millisecond;
a lookup takes about a microsecond. The tries are built once from misaki's own data and saved
under the cache directory, named after misaki's version; a damaged or missing file is rebuilt.

`TrieMap` answers the lookups misaki's ``Lexicon`` makes (``get``, ``[]``, ``in``): values are
phoneme strings, or for heteronyms a dict from part-of-speech tag to phonemes (kept as JSON).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Pronunciation = str | dict[str, Any]
_DICT = b"\x00"


def _encode(value: Pronunciation) -> bytes:
    return value.encode() if isinstance(value, str) else _DICT + json.dumps(value).encode()


def _decode(raw: bytes) -> Pronunciation:
    if raw.startswith(_DICT):
        decoded: dict[str, Any] = json.loads(raw[1:])
        return decoded
    return raw.decode()


class TrieMap(Mapping[str, Pronunciation]):
    """A read-only str → pronunciation mapping over a `marisa_trie.BytesTrie`."""

    def __init__(self, trie: Any) -> None:
        self._trie = trie

    def __getitem__(self, key: str) -> Pronunciation:
        found = self._trie.get(key) if isinstance(key, str) else None
        if not found:
            raise KeyError(key)
        return _decode(found[0])

    def get(self, key: str, default: Any = None) -> Any:
        found = self._trie.get(key) if isinstance(key, str) else None
        return _decode(found[0]) if found else default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._trie

    def __iter__(self) -> Iterator[str]:
        return iter(self._trie.keys())

    def __len__(self) -> int:
        return len(self._trie)


def _paths(british: bool, directory: Path) -> dict[str, Path]:
    import misaki

    return {part: directory / f"lexicon-{'gb' if british else 'us'}-misaki{misaki.__version__}-{part}.marisa"
            for part in ("golds", "silvers")}


def _mapped(paths: dict[str, Path]) -> dict[str, TrieMap]:
    """Every part mapped, or nothing (a part missing or damaged)."""
    import marisa_trie

    tries: dict[str, TrieMap] = {}
    for part, path in paths.items():
        trie = marisa_trie.BytesTrie()
        try:
            trie.mmap(str(path))
        except Exception:  # missing, or damaged: the caller builds all parts again from misaki's data
            return {}
        tries[part] = TrieMap(trie)
    return tries


def load(british: bool, directory: Path, baked: Path | None = None) -> Any:
    """A misaki ``Lexicon`` whose ``golds``/``silvers`` are tries mapped from ``baked`` (read-only, made at
    image build by ``python -m app.text.lexicon``) when it holds them, else from ``directory`` (built there
    first when missing or unreadable)."""
    import marisa_trie
    from misaki import en

    start = time.perf_counter()
    tries = _mapped(_paths(british, baked)) if baked is not None else {}
    paths = _paths(british, directory)
    if not tries:
        tries = _mapped(paths)
    if len(tries) < len(paths):
        source = en.Lexicon(british)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for part, path in paths.items():
                built = marisa_trie.BytesTrie((k, _encode(v)) for k, v in getattr(source, part).items())
                partial = path.with_name(f".{path.name}.{os.getpid()}")
                try:
                    built.save(str(partial))
                    os.replace(partial, path)  # whole or not at all
                finally:
                    partial.unlink(missing_ok=True)
                trie = marisa_trie.BytesTrie()
                trie.mmap(str(path))
                tries[part] = TrieMap(trie)
        except OSError as exc:  # read-only or full: misaki's dicts serve, at their memory cost
            log.warning("could not save the lexicon tries in %s (%s); using misaki's in-memory lexicon", directory, exc)
            return source
        del source
        log.info("lexicon tries built in %s in %.2f s", directory, time.perf_counter() - start)
    # Mirrors misaki.en.Lexicon.__init__ with the tries for the dicts (its checks ran on the build).
    lexicon = en.Lexicon.__new__(en.Lexicon)
    lexicon.british = british
    lexicon.cap_stresses = (0.5, 2)
    lexicon.golds = tries["golds"]
    lexicon.silvers = tries["silvers"]
    return lexicon


def files(directory: Path) -> list[Path]:
    return sorted(directory.glob("lexicon-*.marisa")) if directory.is_dir() else []


def main(argv: list[str]) -> int:
    """``python -m app.text.lexicon DIR``: build both accents' tries into DIR (the image build bakes them)."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m app.text.lexicon DIR\n")
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for british in (False, True):
        load(british, Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
