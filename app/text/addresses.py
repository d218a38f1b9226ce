"""Web addresses, e-mail addresses and phone numbers, as a listener expects to hear them (`app.text.normalize`).

misaki reads ``https://example.com/docs`` as letters and colons ("h t t p s colon slash slash..."), an address
as one run-together word, and ``555-0142`` as a sum ("five hundred fifty-five, one hundred forty-two"). Here an
address is said part by part with its marks named ("example dot com slash docs"; the scheme is left unsaid, as
people do), and a phone number digit by digit in its groups ("five five five, zero one four two").
"""

from __future__ import annotations

import re

_MARKS = {".": "dot", "/": "slash", "-": "dash", "_": "underscore", "?": "question mark", "=": "equals",
          "&": "and", "#": "hash", ":": "colon", "~": "tilde", "%": "percent", "+": "plus", "@": "at"}
_SPELLED = {"io": "I O", "ai": "A I", "uk": "U K", "de": "D E", "fr": "F R", "eu": "E U", "us": "U S",
            "tv": "T V", "edu": "E D U"}
"""Top-level domains said letter by letter (``com``, ``org``, ``net`` and ``gov`` are said as words)."""
_TLDS = r"(?:com|org|net|io|ai|dev|edu|gov|co|uk|de|fr|eu|us|tv|app|info|biz|me)"
_TRAILING = ".,;:!?)]}'\""
_VOWELS = frozenset("aeiouyAEIOUY")
_PART = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9]")

EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
URL = re.compile(
    r"(?<![\w@/.])(?:(?:https?://|www\.)[^\s<>\"'()\[\]{}]+"
    rf"|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.{_TLDS}\b(?![.-]?\w)(?:/[^\s<>\"'()\[\]{{}}]*)?)")
PHONES = (
    re.compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]\(?\d{1,4}\)?){2,5}(?![\w-])"),
    re.compile(r"(?<![\w+])\+\d{8,15}(?!\w)"),
    re.compile(r"(?<![\w(-])(?:1[-. ])?(?:\(\d{3}\) ?|\d{3}[-. ])\d{3}[-.]\d{4}(?![\w-])"),
    re.compile(r"(?<![\w.-])\d{3}-\d{4}(?![\w-])"),
)
"""International (``+1 415 555 0142``, ``+14155550142``), North American (``(415) 555-0142``, ``415-555-0142``,
``1-800-555-0199``) and local (``555-0142``) numbers; each one's digit groups are read apart."""
_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _word(part: str, host: bool) -> str:
    """One run of letters or digits of an address: ``www`` and other vowel-less short runs letter by letter, and
    in the host name the top-level domains that are said so."""
    if host and part.lower() in _SPELLED:
        return _SPELLED[part.lower()]
    if part.isalpha() and len(part) <= 5 and not _VOWELS.intersection(part):
        return " ".join(part)
    return part


def _said(address: str, host: bool = True, marks: dict[str, str] = _MARKS) -> str:
    """``address`` part by part, its marks named in ``marks``; the host ends at its first ``/`` (an e-mail address is
    all host after its ``@``)."""
    said: list[str] = []
    for part in _PART.findall(address):
        said.append(_word(part, host) if part[0].isalnum() else marks.get(part, " "))
        host = host and part != "/"
    return " ".join(" ".join(said).split())


def _trailing(found: str) -> tuple[str, str]:
    """A match without the punctuation that ends the sentence around it (``see example.com.``)."""
    core = found.rstrip(_TRAILING)
    return core, found[len(core):]


def read_url(m: re.Match[str], marks: dict[str, str] = _MARKS) -> str:
    """A web address said part by part (``marks``: the marks' names in the text's language)."""
    core, tail = _trailing(m[0])
    core = re.sub(r"^https?://", "", core).rstrip("/")
    return _said(core, marks=marks) + tail


def read_email(m: re.Match[str], marks: dict[str, str] = _MARKS) -> str:
    """An e-mail address said part by part, its ``@`` as ``marks`` names it."""
    core, tail = _trailing(m[0])
    local, _, domain = core.partition("@")
    return f"{_said(local, host=False, marks=marks)} {marks['@']} {_said(domain, marks=marks)}{tail}"


def read_phone(m: re.Match[str]) -> str:
    groups = re.findall(r"\+|\d+", m[0])
    said = [("plus " if g == "+" else "") if g == "+" else " ".join(_DIGITS[int(d)] for d in g) for g in groups]
    # "+" joins the group after it: "plus one, four one five, ..."
    joined: list[str] = []
    for part in said:
        if joined and joined[-1] == "plus ":
            joined[-1] += part
        else:
            joined.append(part)
    return ", ".join(joined)
