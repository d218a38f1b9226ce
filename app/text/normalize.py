"""English text as language models write it, rewritten into words a listener expects, before misaki reads it.

misaki already reads money (``$5.20``), ordinals, percentages, years, ``Dr.`` and ``U.S.`` right; what it reads
wrong is rewritten here and nothing else: ISO and written dates (``2026-12-07`` came out as "twenty twenty,
six-twelve oh seven"), 24-hour and am/pm times, units and their abbreviations (``30 cm`` as letters), web
addresses and e-mail addresses (`app.text.addresses`), phone numbers (``555-0142`` as "five hundred fifty-five..."),
the currencies misaki drops (``¥``, ``₹``), thousands written ``k`` after money, ``#1``, and ``file(s)``.

Each rule is a regular expression that replaces only its own spans, so text that none matches comes back as the
same string, and misaki reads it exactly as before (tests/app/text/test_normalize.py checks both).
Numbers that misaki reads well (``2.5`` before a unit) are left as digits; what it reads badly is written in words
with num2words.

A request turns the whole of it off, or any group, with Kokoro-FastAPI's ``normalization_options`` (`Normalization`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from num2words import num2words

from app.errors import InvalidInput, InvalidType
from app.text import addresses


@dataclass(frozen=True)
class Normalization:
    """Which rewrites a request wants: Kokoro-FastAPI's ``normalization_options``, field for field."""

    normalize: bool = True
    """All of it; false reads the text exactly as written."""
    unit_normalization: bool = True
    """``30 cm`` → "30 centimeters" (on by default here: off, misaki spells the letters out)."""
    url_normalization: bool = True
    email_normalization: bool = True
    optional_pluralization_normalization: bool = True
    """``file(s)`` → "files"."""
    phone_normalization: bool = True
    replace_remaining_symbols: bool = True
    """``#1`` → "number 1", and the currencies misaki drops (``¥500`` → "500 yen")."""

    @classmethod
    def from_body(cls, value: Any) -> Normalization:
        """The request's ``normalization_options`` (an object of booleans; absent or null: all on)."""
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise InvalidType("'normalization_options' must be an object", param="normalization_options")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise InvalidInput(f"unknown normalization option {unknown[0][:40]!r}; use {', '.join(sorted(known))}",
                               param="normalization_options")
        for name, flag in value.items():
            if not isinstance(flag, bool):
                raise InvalidType(f"normalization option '{name}' must be a boolean", param="normalization_options")
        return cls(**value)


DEFAULT = Normalization()
OFF = Normalization(normalize=False)

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_MONTH_NAMES = {m.lower(): i for i, m in enumerate(_MONTHS, 1)}
_MONTH_NAMES.update({m[:3].lower(): i for i, m in enumerate(_MONTHS, 1)})
_MONTH_NAMES["sept"] = 9
_MONTH = r"(January|February|March|April|May|June|July|August|September|October|November|December|" \
         r"Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)"
_ORD = r"(?:st|nd|rd|th)?"


def words(number: int) -> str:
    """A cardinal in words (``21`` → "twenty-one")."""
    return str(num2words(number))


def ordinal(number: int) -> str:
    return str(num2words(number, to="ordinal"))


def year(number: int) -> str:
    """A year as it is said: "twenty twenty-six", "nineteen oh five", "two thousand five"."""
    return str(num2words(number, to="year")).replace(" and ", " ")


def _date(month: int, day: int, year_: int | None) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    said = f"{_MONTHS[month - 1]} {ordinal(day)}"
    return said if year_ is None else f"{said}, {year(year_)}"


def _iso_date(m: re.Match[str]) -> str:
    return _date(int(m[2]), int(m[3]), int(m[1])) or m[0]


def _slash_date(british: bool) -> Callable[[re.Match[str]], str]:
    def read(m: re.Match[str]) -> str:
        first, second = int(m[1]), int(m[2])
        month, day = (second, first) if british else (first, second)
        # The accent's order first; where that is no date (``03/15`` for en-gb), the other one is meant.
        return _date(month, day, int(m[3])) or _date(day, month, int(m[3])) or m[0]
    return read


def _month_day(m: re.Match[str]) -> str:
    return _date(_MONTH_NAMES[m[1].lower()], int(m[2]), int(m[3]) if m[3] else None) or m[0]


def _day_month(m: re.Match[str]) -> str:
    day, month = int(m[2]), _MONTH_NAMES[m[3].lower()]
    if not 1 <= day <= 31:
        return m[0]
    said = f"{m[1] or 't'}he {ordinal(day)} of {_MONTHS[month - 1]}"
    return said if not m[4] else f"{said}, {year(int(m[4]))}"


_DATES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str] | None]] = [
    (re.compile(r"(?<![\w-])(\d{4})-(\d{2})-(\d{2})(?![\w-])"), _iso_date),
    (re.compile(r"(?<![\w/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\w/])"), None),  # the accent decides the order
    (re.compile(rf"\b{_MONTH}\.? (\d{{1,2}}){_ORD}(?:,? (\d{{4}}))?\b(?!:)"), _month_day),
    (re.compile(rf"\b(?:([Tt])he )?(\d{{1,2}}){_ORD} (?:of )?{_MONTH}\.?(?:,? (\d{{4}}))?\b"), _day_month),
]

_MERIDIEM = r"(?:\s?([ap])(?:m|\.m\.?)(?!\w))"
"""``am``, ``a.m.``, ``PM``...: said "A M" or "P M". A full stop after ``pm`` is the sentence's and stays."""
_TIME = re.compile(rf"(?<![\w:.+])([01]?\d|2[0-3]):([0-5]\d)(?![\w:]|\.\d){_MERIDIEM}?", re.IGNORECASE)
_HOUR = re.compile(rf"(?<![\w:.])(1[0-2]|0?[1-9]){_MERIDIEM}", re.IGNORECASE)


def _time(m: re.Match[str]) -> str:
    hour, minute, meridiem = int(m[1]), int(m[2]), m[3]
    if hour == minute == 0 and not meridiem:
        return "midnight"
    said = words(hour)
    if minute == 0:
        said += "" if meridiem else (" o'clock" if hour <= 12 else " hundred")
    else:
        said += (" oh " if minute < 10 else " ") + words(minute)
    return said + (f" {meridiem.upper()}M{_stop(m)}" if meridiem else "")


def _hour(m: re.Match[str]) -> str:
    return f"{words(int(m[1]))} {m[2].upper()}M{_stop(m)}"


def _stop(m: re.Match[str]) -> str:
    """The full stop of ``a.m.`` where it also ends the sentence (a capital follows)."""
    return "." if m[0].endswith(".") and re.match(r"\s+[A-Z]", m.string[m.end():]) else ""


_UNITS: dict[str, tuple[str, str]] = {
    "mm": ("millimeter", "millimeters"), "cm": ("centimeter", "centimeters"), "m": ("meter", "meters"),
    "km": ("kilometer", "kilometers"), "ft": ("foot", "feet"), "yd": ("yard", "yards"), "mi": ("mile", "miles"),
    "mg": ("milligram", "milligrams"), "g": ("gram", "grams"), "kg": ("kilogram", "kilograms"),
    "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"),
    "ml": ("milliliter", "milliliters"), "mL": ("milliliter", "milliliters"), "l": ("liter", "liters"),
    "L": ("liter", "liters"),
    "km/h": ("kilometer per hour", "kilometers per hour"), "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"), "m/s": ("meter per second", "meters per second"),
    "°C": ("degree Celsius", "degrees Celsius"), "ºC": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"), "ºF": ("degree Fahrenheit", "degrees Fahrenheit"),
    "KB": ("kilobyte", "kilobytes"), "kB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"), "TB": ("terabyte", "terabytes"),
    "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"),
    "W": ("watt", "watts"), "kW": ("kilowatt", "kilowatts"), "kWh": ("kilowatt hour", "kilowatt hours"),
    "V": ("volt", "volts"), "ms": ("millisecond", "milliseconds"), "sec": ("second", "seconds"),
    "secs": ("second", "seconds"), "min": ("minute", "minutes"), "mins": ("minute", "minutes"),
    "hr": ("hour", "hours"), "hrs": ("hour", "hours"),
}
"""Abbreviations read after a number. Left out on purpose: ``s`` and ``h`` (``the 80s``), ``in`` (a word),
``A`` and ``K`` (grades, thousands)."""
_UNIT = re.compile(
    r"(?<![\w.,$€£¥₹#])(\d+(?:,\d{3})*(?:\.\d+)?)(\s?)("
    + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
    + r")(?![\w/°])")


_SPACED_ONLY = frozenset({"m", "W", "V", "L"})
"""Written close up, these are as often something else (``5m`` for millions, ``5V`` a model name): only a space
before them marks a unit."""


def _unit(m: re.Match[str]) -> str:
    one, many = _UNITS[m[3]]
    if not m[2] and m[3] in _SPACED_ONLY:
        return m[0]
    return f"{m[1]} {one if m[1] == '1' else many}"


_CURRENCIES = {"¥": "yen", "₹": "rupees", "₩": "won", "₽": "rubles", "₺": "lira"}
_CURRENCY = re.compile(r"([¥₹₩₽₺])\s?(\d+(?:,\d{3})*(?:\.\d+)?)(?![\d.,]*\d)")
_THOUSANDS = re.compile(r"([$€£])(\d+(?:\.\d+)?)([kK])\b")
_NUMBER_SIGN = re.compile(r"(?<![\w&])#(\d+)\b")
_PLURAL = re.compile(r"\b([A-Za-z]+)\((e?s)\)")
_RANGE = re.compile(r"(?<![\w.,:/$€£¥₹-])(\d{1,3})[-–](\d{1,3})(?= [A-Za-z%])")
"""``10-15 minutes``: a range only before a word (``3-2.`` may be a score)."""
_TIME_RANGE = re.compile(r"\b([AP]M)[-–](?=\w)")
"""``9am-5pm``, once both ends are read: "nine AM to five PM"."""


def english(text: str, options: Normalization = DEFAULT, *, british: bool = False) -> str:
    """``text`` with the spans that `Normalization` covers rewritten; the same string where none is found."""
    if not options.normalize:
        return text
    if options.email_normalization:
        text = addresses.EMAIL.sub(addresses.read_email, text)
    if options.url_normalization:
        text = addresses.URL.sub(addresses.read_url, text)
    for pattern, read in _DATES:
        text = pattern.sub(read or _slash_date(british), text)
    if options.phone_normalization:
        for phone in addresses.PHONES:
            text = phone.sub(addresses.read_phone, text)
    text = _RANGE.sub(lambda m: f"{m[1]} to {m[2]}", text)
    text = _TIME.sub(_time, text)
    text = _HOUR.sub(_hour, text)
    text = _TIME_RANGE.sub(r"\1 to ", text)
    if options.replace_remaining_symbols:
        text = _CURRENCY.sub(lambda m: f"{m[2]} {_CURRENCIES[m[1]]}", text)
        text = _THOUSANDS.sub(lambda m: f"{m[1]}{m[2]} thousand", text)
        text = _NUMBER_SIGN.sub(lambda m: f"number {m[1]}", text)
    if options.unit_normalization:
        text = _UNIT.sub(_unit, text)
    if options.optional_pluralization_normalization:
        text = _PLURAL.sub(lambda m: m[1] + m[2], text)
    return text
