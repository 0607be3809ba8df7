"""Personal data and secrets out: e-mail addresses, phone numbers, IP addresses (public ones, and private or
documentation IPv4 addresses as their own kind), card and bank account
(IBAN) numbers, US SSNs and UK National Insurance numbers, private keys and other PEM blocks, cloud and
service tokens (AWS, Azure, GitHub, GitLab, Slack, Stripe, Google, OpenAI, Anthropic, Hugging Face, npm,
PyPI, SendGrid and more by prefix), JWTs, authorization headers, credentials in URLs and query strings,
and `password = ...`-style assignments (code, JSON, YAML, .env, INI, netrc, connection strings) become
typed placeholders such as `<EMAIL>`.

Detectors (`foundry/data/privacy/pii_patterns.py`) are regular expressions, most with a check behind them (Luhn
for card numbers, mod 97 for IBANs, the `ipaddress` module for addresses, a JSON header for JWTs). The
scrubber in `clean` runs the kinds `data.pii` names; the validation gate searches with every kind.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from foundry.data.privacy.pii_checks import luhn_ok
from foundry.data.privacy.pii_patterns import ANCHORS, HEX, KINDS, LOCAL_PART, NEEDS, PATTERNS, PLACEHOLDERS, valid
from foundry.data.privacy.pii_tokens import WRAP_MARKERS

__all__ = ["KINDS", "PLACEHOLDERS", "Span", "example", "find", "luhn_ok", "mask", "scrub"]
MAX_PASSES = 4
_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS.values()))
# Where a string literal is continued on the next line (`"ab"\n "cd"`, `'ab' +\n 'cd'`) or after a
# backslash-newline: a secret may be split there.
_GLUE = re.compile(r"(?P<q>[\"'])[ \t]*\+?[ \t]*\\?\r?\n[ \t]*\+?[ \t]*(?P=q)|\\\r?\n[ \t]*")
_WORDY = re.compile(r"[A-Za-z0-9_+/=-]")
# A token hard-wrapped (an e-mail, a terminal, a 76-column file): a line that ends in a word holding a token's
# prefix (`ghp_Ab3De6`), and the next line goes on with no space. Only these lines are joined: words end prose lines.
_WORD_TO_LINE_END = re.compile(r"[\w.~+/=:-]+", re.ASCII)
_WRAP = re.compile(r"\r?\n[ \t]*(?=[A-Za-z0-9_-])")


@dataclass(frozen=True)
class Span:
    kind: str
    start: int
    end: int


def find(text: str, kinds: tuple[str, ...] | list[str] = KINDS) -> Iterator[Span]:
    """Every span a detector accepts, detector by detector (spans of different kinds may overlap). A
    secret split by string concatenation or a line continuation (`"sk-proj-ab"\\n    "cd..."`) is
    searched for in the lines around the join with the join taken out, and its span covers the join."""
    windows = _windows(text)
    for kind in kinds:
        yield from _find_kind(text, kind)
        for flat, where in windows:
            for span in _find_kind(flat, kind):
                start, end = where[span.start], where[span.end - 1] + 1
                if end - start != span.end - span.start:  # a join inside: not found in the text itself
                    yield Span(kind, start, end)


def _find_kind(text: str, kind: str) -> Iterator[Span]:
    needs = NEEDS.get(kind)
    if needs is not None and not needs(text):
        return
    for pattern in PATTERNS[kind]:
        for match in _matches(pattern, text):
            group = next((g for g in ("span", "bare") if match.re.groupindex.get(g) and match.group(g)), 0)
            start, end = match.start(group), match.end(group)
            if kind == "email":
                local = LOCAL_PART.search(text, max(0, start - 64), start)
                if local is None:
                    continue
                start = local.start()
            elif kind == "ipv6":
                start = _extend_ipv6(text, start)
                if start is None:
                    continue
            if valid(kind, text[start:end], text, match):
                yield Span(kind, start, end)


def _matches(pattern: re.Pattern, text: str) -> Iterator[re.Match]:
    """`pattern.finditer(text)`, but tried only where one of its ANCHORS words starts (found by `str.find`,
    case-insensitively): a case-insensitive alternation of names otherwise is tried at every letter."""
    anchors, lowered = ANCHORS.get(pattern), _lower(text)
    if anchors is None or len(lowered) != len(text):  # a few characters change length when lowered
        yield from pattern.finditer(text)
        return
    starts, last = set(), 0
    for anchor in anchors:
        at = lowered.find(anchor)
        while at >= 0:
            starts.add(at)
            at = lowered.find(anchor, at + 1)
    for start in sorted(starts):
        match = pattern.match(text, start) if start >= last else None
        if match:
            last = max(match.end(), start + 1)
            yield match


@functools.lru_cache(maxsize=4)
def _lower(text: str) -> str:
    return text.lower()


@functools.lru_cache(maxsize=8)
def _windows(text: str) -> tuple[tuple[str, list[int]], ...]:
    """Cached: `scrub` asks once per kind about the same text."""
    return tuple(_joined_windows(text))


def _joined_windows(text: str) -> Iterator[tuple[str, list[int]]]:
    """The lines around each join that cuts a word in two (`"ab"\\n "cd"`, not `"ab "\\n "cd"`, and a hard
    wrap inside a token), without the joins, and where each of their characters stands in the text."""
    cuts = [g.span() for g in _GLUE.finditer(text) if _WORDY.match(text, g.start() - 1) and _WORDY.match(text, g.end())]
    wraps = _wraps(text)
    cuts = sorted(cuts + wraps)
    while cuts:
        first = last = cuts.pop(0)
        while cuts and cuts[0][0] <= text.find("\n", last[1]) + 1:  # a chain of continued lines
            last = cuts.pop(0)
        start = text.rfind("\n", 0, first[0]) + 1
        end = text.find("\n", last[1])
        end = len(text) if end < 0 else end
        parts, where, at = [], [], start
        for glue in sorted(
            [g.span() for g in _GLUE.finditer(text, start, end)] + [w for w in wraps if start < w[0] < end]
        ):
            parts.append(text[at : glue[0]])
            where.extend(range(at, glue[0]))
            at = glue[1]
        parts.append(text[at:end])
        where.extend(range(at, end))
        yield "".join(parts), where


def _wraps(text: str) -> list[tuple[int, int]]:
    """Where a line ends in a word that starts a token (`ghp_Ab3De6`, `key=sk-proj-Ab`): the hard wraps to join.
    Found from the markers (rare) with `str.find`, not by an expression tried at every line's end."""
    wraps = set()
    for marker in WRAP_MARKERS:
        at = text.find(marker)
        while at >= 0:
            end = text.find("\n", at)
            starts_word = at == 0 or not (text[at - 1].isalnum() or text[at - 1] == "_")
            if end > 0 and starts_word and _WORD_TO_LINE_END.fullmatch(text, at, end - (text[end - 1] == "\r")):
                wrap = _WRAP.match(text, end - (text[end - 1] == "\r"))
                wraps.update([wrap.span()] if wrap else [])
            at = text.find(marker, at + 1)
    return sorted(wraps)


def _extend_ipv6(text: str, colon: int) -> int | None:
    """Where the address that has its first colon at `colon` starts, or None if it runs on from a word."""
    start = colon
    while start > colon - 4 and start > 0 and text[start - 1] in HEX:
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
        spans = sorted(find(text, (kind,)), key=lambda span: (span.start, -span.end))
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


def mask(text: str) -> str:
    """Word shapes only: letters become x or X, digits 9; placeholders, spaces and punctuation stay.
    So an excerpt shows where a placeholder sits, never a name, number or secret beside it."""
    parts, last = [], 0
    for found in _PLACEHOLDER.finditer(text):
        parts += [_shape(text[last : found.start()]), found.group()]
        last = found.end()
    return "".join(parts) + _shape(text[last:])


def _shape(text: str) -> str:
    return "".join(("X" if ch.isupper() else "x") if ch.isalpha() else "9" if ch.isdigit() else ch for ch in text)


def example(text: str, kind: str, width: int = 40) -> str | None:
    """The audit's evidence: about `width` characters either side of the first placeholder of `kind`,
    masked (`mask`), so it holds the placeholder and the shape of the words around it, no data."""
    at = text.find(PLACEHOLDERS[kind])
    if at < 0:
        return None
    start, end = max(0, at - width), min(len(text), at + len(PLACEHOLDERS[kind]) + width)
    excerpt = mask(text[start:end]).replace("\n", "⏎")
    return ("…" if start else "") + excerpt + ("…" if end < len(text) else "")
