"""Personal data out: e-mail addresses, phone numbers, IP addresses, card numbers, AWS keys and
private key blocks become typed placeholders such as `<EMAIL>`.

Detectors are regular expressions, some with a check behind them (Luhn for card numbers, the
`ipaddress` module for addresses), tuned to leave source code alone: the default corpus is Python,
where `a[1::2]`, version strings and long integer constants must not read as personal data. The same
detectors scrub in `clean` and search again in the validation gate, so the gate sees exactly what
the scrubber would have replaced.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

PLACEHOLDERS = {
    "private_key": "<PRIVATE_KEY>",
    "aws_access_key": "<AWS_ACCESS_KEY>",
    "aws_secret_key": "<AWS_SECRET_KEY>",
    "email": "<EMAIL>",
    "credit_card": "<CREDIT_CARD>",
    "ipv6": "<IPV6>",
    "ipv4": "<IPV4>",
    "phone": "<PHONE>",
}
KINDS = tuple(PLACEHOLDERS)  # also the order they run in: longer, more specific patterns first
MAX_PASSES = 4

# Each expression starts with a literal or a character class, never a look-behind, so the regex
# engine skips ahead to candidate characters instead of trying every position (10x faster); the
# boundary look-behind comes right after the first character.
_PATTERNS = {
    # A block cut off before its END line is still a key: take it to the end of the document.
    "private_key": re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        re.DOTALL,
    ),
    "aws_access_key": re.compile(
        r"A(?<![A-Z0-9]A)(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA|3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])"
    ),
    # A secret key is 40 characters of base64: too common a shape to catch without its name beside it.
    "aws_secret_key": re.compile(
        r"(?i:aws_?secret_?(?:access_?)?key)[\"']?\s*[:=]\s*[\"']?(?P<span>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
    ),
    # Found from the "@"; the part before it is matched backwards by _LOCAL_PART.
    "email": re.compile(r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"),
    # 13 to 19 digits, optionally in groups split by one space or dash; checked with Luhn below.
    "credit_card": re.compile(r"[2-6](?<![\w.+-][2-6])\d{3}(?:[ -]?\d){9,15}(?![\w-]|\.\d)"),
    # Found from the first colon; up to four hex digits before it are taken in by _extend_ipv6.
    "ipv6": re.compile(r":(?:[0-9A-Fa-f]{0,4}:){1,6}[0-9A-Fa-f]{0,4}(?![\w:])"),
    "ipv4": re.compile(r"\d(?<![\w.]\d)\d{0,2}(?:\.\d{1,3}){3}(?!\w|\.\d)"),
    # International (+CC ...) or North American ((555) 123-4567, 555-123-4567, 555.123.4567); bare
    # digit runs are left alone: in code they are constants far more often than telephones.
    "phone": re.compile(
        r"[+(\d](?<![\w+.-][+(\d])(?:(?<=\+)\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]\d{2,4}){1,4}"
        r"|(?<=\()\d{3}\)[ .-]?\d{3}[ .-]\d{4}|(?<=\d)\d{2}([.-])\d{3}\1\d{4})(?![\w.-]\d|\w)"
    ),
}
_LOCAL_PART = re.compile(r"(?<![\w.%+-])[A-Za-z0-9][\w.%+-]{0,63}\Z")
_HEX = frozenset("0123456789abcdefABCDEF")
_AWS_PREFIXES = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "A3T")
# Cheap tests that rule a detector out without running its expression.
_NEEDS: dict[str, Callable[[str], bool]] = {
    "private_key": lambda t: "PRIVATE KEY" in t,
    "aws_access_key": lambda t: any(p in t for p in _AWS_PREFIXES),
    "aws_secret_key": lambda t: "ecret" in t or "ECRET" in t,
    "email": lambda t: "@" in t,
}


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _ip_identifies_someone(text: str) -> bool:
    """Loopback, private, link-local, documentation and unspecified addresses identify no one."""
    try:
        return ipaddress.ip_address(text).is_global
    except ValueError:
        return False


def _valid(kind: str, value: str) -> bool:
    if kind == "credit_card":
        digits = re.sub(r"[ -]", "", value)
        return 13 <= len(digits) <= 19 and luhn_ok(digits)
    if kind == "ipv4":
        return _ip_identifies_someone(value)
    if kind == "ipv6":
        # At least three groups: `a[1::2]` and `12:30` are not addresses.
        return sum(1 for group in value.split(":") if group) >= 3 and _ip_identifies_someone(value)
    if kind == "phone":
        return 7 <= sum(ch.isdigit() for ch in value) <= 15
    return True


@dataclass(frozen=True)
class Span:
    kind: str
    start: int
    end: int


def find(text: str, kinds: tuple[str, ...] | list[str] = KINDS) -> Iterator[Span]:
    """Every span a detector accepts, detector by detector (spans of different kinds may overlap)."""
    for kind in kinds:
        needs = _NEEDS.get(kind)
        if needs is not None and not needs(text):
            continue
        for match in _PATTERNS[kind].finditer(text):
            group = "span" if "span" in match.re.groupindex else 0
            start, end = match.start(group), match.end(group)
            if kind == "email":
                local = _LOCAL_PART.search(text, max(0, start - 64), start)
                if local is None:
                    continue
                start = local.start()
            elif kind == "ipv6":
                start = _extend_ipv6(text, start)
                if start is None:
                    continue
            if _valid(kind, text[start:end]):
                yield Span(kind, start, end)


def _extend_ipv6(text: str, colon: int) -> int | None:
    """Where the address that has its first colon at `colon` starts, or None if it runs on from a word."""
    start = colon
    while start > colon - 4 and start > 0 and text[start - 1] in _HEX:
        start -= 1
    if start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_:."):
        return None
    return start


def scrub(text: str, kinds: tuple[str, ...] | list[str] = KINDS) -> tuple[str, Counter]:
    """The text with each detected span replaced by its placeholder, and the count per kind.

    Detectors run in `KINDS` order on the text as the earlier ones left it, so a key block is one
    `<PRIVATE_KEY>`, not a scatter of smaller matches inside it. A replacement changes what its
    neighbours see (`4567(555) 123-4567` hides the second number until the first is gone), so a
    text that changed is searched again, until nothing is found: what the gate searches then finds nothing.
    """
    counts: Counter = Counter()
    for _ in range(MAX_PASSES):
        text, found = _scrub_once(text, kinds)
        counts += found
        if not found:
            break
    return text, counts


def _scrub_once(text: str, kinds: tuple[str, ...] | list[str]) -> tuple[str, Counter]:
    counts: Counter = Counter()
    for kind in (k for k in KINDS if k in kinds):
        spans = list(find(text, (kind,)))
        if not spans:
            continue
        counts[kind] = len(spans)
        parts, last = [], 0
        for span in spans:
            if span.start < last:  # overlaps the previous one (a@b.org@c.com): one placeholder for both
                last = max(last, span.end)
                continue
            parts += [text[last : span.start], PLACEHOLDERS[kind]]
            last = span.end
        text = "".join(parts) + text[last:]
    return text, counts


def example(text: str, kind: str, width: int = 40) -> str | None:
    """A short excerpt of scrubbed text around the first placeholder of `kind`: the audit's evidence,
    which by construction holds a placeholder where the personal data was."""
    at = text.find(PLACEHOLDERS[kind])
    if at < 0:
        return None
    start, end = max(0, at - width), min(len(text), at + len(PLACEHOLDERS[kind]) + width)
    return ("…" if start else "") + text[start:end].replace("\n", "⏎") + ("…" if end < len(text) else "")
