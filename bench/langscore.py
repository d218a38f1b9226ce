"""Error rates per language for ``python -m bench quality --languages``: what a recogniser heard against the text.

Both sides are made comparable the same way before counting, so that how a recogniser writes a thing (``10`` or
"diez", ``l'eau`` or "l eau", 們 or 们) costs nothing and only what was heard differently counts:

- languages written with spaces (English, Spanish, French, Italian, Portuguese, Hindi): word error rate. Text is
  lowercased; apostrophes, hyphens and slashes split words; other punctuation goes; numbers become words with
  num2words in the language (Hindi has none there: its corpus writes numbers in words); Hindi loses its nukta
  and candrabindu marks, which the recogniser writes or drops by chance. English goes through the server's own
  normalizer first (`app.text.normalize`), so "Dec. 7th" and "December seventh" compare equal, and money,
  ``%``, ``Dr.`` and ``U.S.`` are written out as misaki reads them; Spanish, French, Italian and Portuguese go
  through its rewrite of dates, times and addresses (`app.text.localized`), and French ``14h30`` is "14 heures 30".
- Japanese: character error rate over the reading in katakana (pyopenjtalk), so kanji against kana for the same
  word costs nothing and a misheard word costs its sounds.
- Mandarin: character error rate over one toned pinyin syllable per character (pypinyin; digits first become
  Chinese numerals with cn2an), so simplified against traditional characters costs nothing.

The rate is the edit distance (`bench.transcript.align`) over the reference's length, summed over a corpus
before dividing (not a mean of per-sentence rates).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from num2words import num2words

from bench import transcript

NUMBER_LANGS = {"en": "en", "es": "es", "fr": "fr", "it": "it", "pt": "pt_BR"}
"""num2words's name for each language whose numbers it writes."""
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_SPLIT = re.compile(r"[\s'’`\-‐–—/]+")
_DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _digits(found: str) -> str:
    """A run of seven or more digits in groups (a phone number as a recogniser writes it: ``4-15555-0142``) digit by
    digit, however it was grouped; a shorter run (a price, a count) as it is."""
    digits = [c for c in found if c.isdigit()]
    if len(digits) < 7:
        return found
    return ("plus " if found.startswith("+") else "") + " ".join(_DIGIT_NAMES[int(d)] for d in digits)


_CURRENCY = {"$": "dollars", "€": "euros", "£": "pounds"}
_RECOGNISED_TIME = re.compile(r"\b(\d{1,2})[.]?(\d{2})\s?([AaPp])\.?[Mm]\b\.?")
"""``6.45 pm``, ``805 pm``: a time as a recogniser may write it, made ``6:45 PM`` before the normalizer reads it."""
_ENGLISH = [
    (re.compile(r"([$€£])(\d+)\.(\d\d)\b"),
     lambda m: f"{m[2]} {_CURRENCY[m[1]]} and {int(m[3])} {'cents' if m[1] != '£' else 'pence'}"),
    (re.compile(r"([$€£])(\d[\d,]*(?:\.\d+)?)((?: (?:thousand|million|billion))?)"),
     lambda m: f"{m[2]}{m[3]} {_CURRENCY[m[1]]}"),
    (re.compile(r"\s?%"), lambda m: " percent"),
    (re.compile(r"\+?\d[\d\s,.-]{5,}\d"), lambda m: _digits(m[0])),
    (re.compile(r"\bUS\b"), lambda m: "u s"),
    (re.compile(r"\bDr\."), lambda m: "doctor"),
    (re.compile(r"\bU\.S\.(?:A\.)?"), lambda m: "u s" + (" a" if m[0].endswith("A.") else "")),
]
"""What misaki reads right itself and a recogniser writes as symbols (money, percentages, ``Dr.``, ``U.S.``),
as words, on both sides; and how a recogniser writes what was said right: a time as ``6.45 pm`` or ``805 pm``, a
phone number's digits in any grouping."""


_FRENCH_HOURS = re.compile(r"\b(\d{1,2}) ?h ?(\d{2})?\b")
"""``14h30``, ``9h``: how French writes a time it hears said "quatorze heures trente"."""


@dataclass(frozen=True)
class Score:
    units: int
    """Reference words (or characters)."""
    errors: int
    differences: tuple[str, ...]

    @property
    def rate(self) -> float:
        return self.errors / self.units if self.units else float(self.errors)


def _number(lang: str) -> Any:
    name = NUMBER_LANGS.get(lang)

    def spoken(m: re.Match[str]) -> str:
        text = m[0]
        if name is None:
            return text
        if len(text) > 12:
            return " ".join(str(num2words(int(d), lang=name)) for d in text if d.isdigit())
        # A decimal comma or point: both sides spell it the same way, whichever the language uses.
        value: float | int = float(text.replace(",", ".")) if re.search(r"[.,]\d{1,2}$", text) else int(
            re.sub(r"[.,]", "", text))
        return " " + str(num2words(value, lang=name)) + " "
    return spoken


def _strip_marks(text: str) -> str:
    """Punctuation and symbols out; letters (with their accents), digits and spaces kept."""
    return "".join(c if unicodedata.category(c)[0] in "LNM" or c.isspace() else " " for c in text)


def words(text: str, lang: str) -> list[str]:
    """The comparable words of ``text`` in a language written with spaces (see the module docstring)."""
    if lang == "en":
        from app.text.normalize import english

        text = english(_RECOGNISED_TIME.sub(lambda m: f"{m[1]}:{m[2]} {m[3].upper()}M", text))
        for pattern, spoken in _ENGLISH:
            text = pattern.sub(spoken, text)
        return [w.text for w in transcript.words(text)]
    from app.text import languages, localized
    from app.text.normalize import DEFAULT

    if lang == "fr":
        text = _FRENCH_HOURS.sub(lambda m: f"{m[1]} heures {m[2] or ''}", text)
    text = localized.rewrite(text, languages.parse(lang).key, DEFAULT)  # as the server would (none for Hindi)
    text = unicodedata.normalize("NFC", text.lower())
    if lang == "hi":
        text = unicodedata.normalize("NFD", text).replace("\u093c", "").replace("\u0901", "\u0902")
        text = unicodedata.normalize("NFC", text)
    text = _NUMBER.sub(_number(lang), text.replace("%", " % "))
    return [w for w in _strip_marks(" ".join(_SPLIT.split(text))).split() if w]


def kana(text: str) -> list[str]:
    """Japanese as the characters of its katakana reading."""
    import pyopenjtalk

    reading = str(pyopenjtalk.g2p(text, kana=True))
    return [c for c in reading if unicodedata.category(c)[0] == "L"]


def pinyin(text: str) -> list[str]:
    """Mandarin as one toned pinyin syllable per Han character (other characters dropped)."""
    import cn2an
    from pypinyin import Style
    from pypinyin import pinyin as read

    text = cn2an.transform(text, "an2cn")
    han = "".join(c for c in text if "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf")
    return [s[0] for s in read(han, style=Style.TONE3, neutral_tone_with_five=True, errors="ignore")]


def units(text: str, lang: str) -> list[str]:
    """What is counted: words, or for Japanese and Mandarin the units of their readings."""
    if lang == "ja":
        return kana(text)
    if lang == "zh":
        return pinyin(text)
    return words(text, lang)


def score(reference: str, heard: str, lang: str) -> Score:
    said, got = units(reference, lang), units(heard, lang)
    alignment = transcript.align(said, got)
    return Score(len(said), alignment.errors, tuple(transcript.differences(said, got, alignment)))


def measure_name(lang: str) -> str:
    return "CER" if lang in ("ja", "zh") else "WER"
