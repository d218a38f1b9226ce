"""Dates, times and web and e-mail addresses in Spanish, French, Italian and Brazilian Portuguese text, rewritten into
the words a listener expects before espeak-ng reads it (`app.text.normalize` does English).

espeak-ng reads numbers, units and money in each of these languages itself, but an ISO date as three numbers
(``2026-12-07``: "deux mille vingt-six douze zéro sept"), a time with its colon left in the phonemes
(``14:30``: "quatorze: trente"), and an address with its dots, slashes and ``@`` dropped
(``jean.dupont@example.fr``: "jean dupont example F R"). Here a date is said as the language writes it out
("7 décembre 2026", "7 de diciembre de 2026"), a time as its hours and minutes ("14 heures 30", "14 y 30"), and an
address part by part with its marks named in the language (`app.text.addresses`). A day-first date with slashes
(``07/12/2026``) is a date in these languages, read the same way. Digits stay digits: espeak-ng reads them.

Each rule replaces only its own spans, so text that none matches comes back as the same string. The request's
``normalization_options`` apply as in English: ``normalize`` off reads the text as written, ``url_normalization``
and ``email_normalization`` off leave addresses alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from app.text import addresses
from app.text.normalize import Normalization


@dataclass(frozen=True)
class Said:
    """How one language says dates, times and the marks of an address."""

    months: tuple[str, ...]
    date: str
    """``{day}``, ``{month}``, ``{year}``: a date written out."""
    time: str
    """``{hour}``, ``{minute}``: a time with its minutes."""
    hour: str
    """``{hour}``: a time on the hour."""
    marks: dict[str, str]
    """The names of an address's marks (`app.text.addresses`), ``@`` included."""
    first: str = "1"
    """The first of a month, as the date says it ("1er" décembre, "primo" dicembre)."""


SAID = {
    "fr-fr": Said(("janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
                   "novembre", "décembre"), "{day} {month} {year}", "{hour} heures {minute}", "{hour} heures",
                  {".": "point", "/": "barre oblique", "-": "tiret", "_": "tiret bas", "@": "arobase",
                   ":": "deux points", "?": "point d'interrogation", "=": "égal", "&": "et", "#": "dièse", "~": "tilde",
                   "%": "pour cent", "+": "plus"}, first="1er"),
    "es": Said(("enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre", "octubre",
                "noviembre", "diciembre"), "{day} de {month} de {year}", "{hour} y {minute}", "{hour} en punto",
               {".": "punto", "/": "barra", "-": "guion", "_": "guion bajo", "@": "arroba", ":": "dos puntos",
                "?": "interrogación", "=": "igual", "&": "y", "#": "almohadilla", "~": "tilde", "%": "por ciento",
                "+": "más"}),
    "it": Said(("gennaio", "febbraio", "marzo", "aprile", "maggio", "giugno", "luglio", "agosto", "settembre",
                "ottobre", "novembre", "dicembre"), "{day} {month} {year}", "{hour} e {minute}", "{hour}",
               {".": "punto", "/": "barra", "-": "trattino", "_": "trattino basso", "@": "chiocciola",
                ":": "due punti", "?": "punto interrogativo", "=": "uguale", "&": "e", "#": "cancelletto",
                "~": "tilde", "%": "per cento", "+": "più"}, first="primo"),
    "pt-br": Said(("janeiro", "fevereiro", "março", "abril", "maio", "junho", "julho", "agosto", "setembro", "outubro",
                   "novembro", "dezembro"), "{day} de {month} de {year}", "{hour} e {minute}", "{hour} horas",
                  {".": "ponto", "/": "barra", "-": "hífen", "_": "sublinhado", "@": "arroba", ":": "dois pontos",
                   "?": "interrogação", "=": "igual", "&": "e", "#": "cerquilha", "~": "til", "%": "por cento",
                   "+": "mais"}, first="1º"),
}
"""By `app.text.languages.Language` key: the languages espeak-ng reads whose dates and addresses are rewritten."""

_ISO = re.compile(r"(?<![\w./-])(\d{4})-(\d{2})-(\d{2})(?![\w/-]|\.\d)")
_DAY_FIRST = re.compile(r"(?<![\w./-])(\d{1,2})/(\d{1,2})/(\d{4})(?![\w/-]|\.\d)")
_TIME = re.compile(r"(?<![\w:.+])([01]?\d|2[0-3]):([0-5]\d)(?![\w:]|\.\d)")


def rewrite(text: str, key: str, options: Normalization) -> str:
    """``text`` in the language ``key`` with its dates, times and addresses written out; the same string where the
    language has no rules here or none matches."""
    said = SAID.get(key)
    if said is None or not options.normalize:
        return text
    if options.email_normalization:
        text = addresses.EMAIL.sub(lambda m: addresses.read_email(m, said.marks), text)
    if options.url_normalization:
        text = addresses.URL.sub(lambda m: addresses.read_url(m, said.marks), text)
    text = _ISO.sub(_date(said, year=1, month=2, day=3), text)
    text = _DAY_FIRST.sub(_date(said, year=3, month=2, day=1), text)
    return _TIME.sub(lambda m: _time(said, int(m[1]), int(m[2])), text)


def _date(said: Said, *, year: int, month: int, day: int) -> Callable[[re.Match[str]], str]:
    def read(m: re.Match[str]) -> str:
        number, of = int(m[day]), int(m[month])
        if not (1 <= of <= 12 and 1 <= number <= 31):
            return m[0]  # not a date: left as written
        return said.date.format(day=said.first if number == 1 else number, month=said.months[of - 1],
                                year=int(m[year]))

    return read


def _time(said: Said, hour: int, minute: int) -> str:
    return said.time.format(hour=hour, minute=minute) if minute else said.hour.format(hour=hour)
