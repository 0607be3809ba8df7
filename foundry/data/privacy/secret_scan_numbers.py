"""The second detector's numbers: card numbers, US SSNs, IBANs, UK National Insurance numbers, and after
their names Canadian SINs, Aadhaar and passport numbers.

Part of `secret_scan` (kept apart for size), with its own checks (Luhn, mod 97, the SSN and NINO rules)
and no code shared with the scrubber's `pii_checks`; each finding is (kind, start, end).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["ids", "numbers"]

_DIGITS = re.compile(r"\d(?<![\w.+/-]\d)[\d .\-/]{7,30}\d(?![\w]|[.\-/]\d)")
_IBAN = re.compile(
    r"\d(?<=[A-Za-z]{2}\d)(?<![\w-][A-Za-z]{2}\d)\d(?:[ ]?[A-Za-z0-9]{4}){2,7}(?:[ ]?[A-Za-z0-9]{1,3})?(?![\w-])"
)
_NINO = re.compile(
    r"\d(?:(?<=[A-Za-z]{2}\d)(?<![\w-][A-Za-z]{2}\d)|(?<=[A-Za-z]{2} \d)(?<![\w-][A-Za-z]{2} \d))"
    r"\d ?\d\d ?\d\d ?[A-Da-d](?![\w-])"
)
# Each IBAN country's length (ISO 13616): `rh199174 suse493210` passes mod 97 by chance, but RH is no country.
_IBAN_LENGTHS = {
    entry[:2]: int(entry[2:])
    for entry in """AD24 AE23 AL28 AT20 AZ28 BA20 BE16 BG22 BH22 BI27 BR29
BY28 CH21 CR22 CY28 CZ24 DE22 DJ27 DK18 DO28 EE20 EG29 ES24 FI18 FK18 FO18 FR27 GB22 GE22 GI23 GL18 GR27 GT28 HR21
HU28 IE22 IL23 IQ23 IS26 IT27 JO30 KW30 KZ20 LB28 LC32 LI21 LT20 LU20 LV21 LY25 MC27 MD24 ME22 MK19 MN20 MR27 MT31
MU30 NI28 NL18 NO15 OM23 PK24 PL28 PS29 PT25 QA29 RO24 RS22 RU33 SA24 SC31 SD18 SE24 SI19 SK24 SM27 SO23 ST25 SV28
TL23 TN24 TR26 UA29 VA22 VG24 XK20 YE30""".split()
}
# A number after its name (`SIN: `, `"aadhaar": "`, `passport no. `): nine or twelve digits alone are constants.
_NAMED = re.compile(
    r"(?i:(sin|social[ _-]?insurance|aadhaa?r|passport)(?:[ _-]?(?:number|no|num|card))?)\.?[^\w\n]{1,5}"
    r"(?:(?:is|was|number|no|#)\.?[^\w\n]{1,5})?([A-Z]?\d[\d -]{6,13}\d)(?![\w-])"
)
_NOT_NINO = ("BG", "GB", "NK", "KN", "TN", "NT", "ZZ")


def numbers(text: str) -> Iterator[tuple[str, int, int]]:
    """Digit groups: cards (Luhn, one separator throughout), SSNs (3-2-4) and phones (a leading +)."""
    for run in _DIGITS.finditer(text):
        value = run.group().strip()
        separators = set(re.findall(r"[ .\-/]", value))
        digits = re.sub(r"\D", "", value)
        if len(separators) <= 1 and 13 <= len(digits) <= 19 and _luhn(digits) and _card_groups(value, digits):
            yield ("credit_card", run.start(), run.end())
        elif re.fullmatch(r"\d{3}([- ])\d\d\1\d{4}", value) and _ssn(digits):
            yield ("national_id", run.start(), run.end())
    for phone in re.finditer(r"\+(?<![\w+]\+)[1-9][\d ().-]{6,20}\d(?![\w.]\d|\w)", text):
        decimal = re.fullmatch(r"\+\d+\.\d+", phone.group()) is not None  # Decimal('+35236450.6')
        if 8 <= sum(ch.isdigit() for ch in phone.group()) <= 15 and not decimal:
            yield ("phone", phone.start(), phone.end())


def _card_groups(value: str, digits: str) -> bool:
    """Issuers' numbers start 2 to 6 (Visa 4, Mastercard 5 and 2, Amex 3, Discover 6), in groups of 4 or more
    (a decimal `3088.37736494778` is two groups); a timestamp or a hash of digits starts anywhere."""
    groups = re.split(r"[ .\-/]", value)
    shaped = len(groups) == 1 or all(len(g) >= 4 for g in groups[:-1]) and (len(groups) > 2 or "." not in value)
    return digits[0] in "23456" and len(set(digits)) > 1 and shaped


def _luhn(digits: str) -> bool:
    doubled = [int(d) * (1 + i % 2) for i, d in enumerate(reversed(digits))]
    return sum(d // 10 + d % 10 for d in doubled) % 10 == 0


def _ssn(digits: str) -> bool:
    return digits[:3] not in ("000", "666") and digits[3:5] != "00" and digits[5:] != "0000" and digits[0] != "9"


def ids(text: str) -> Iterator[tuple[str, int, int]]:
    """IBANs (any case, mod 97) and UK National Insurance numbers, found from their first digit (rarer
    than letters), two letters before it; national numbers after their names."""
    for word in _IBAN.finditer(text):
        compact = text[word.start() - 2 : word.end()].replace(" ", "").upper()
        if _IBAN_LENGTHS.get(compact[:2]) == len(compact) and _mod97(compact):
            yield ("iban", word.start() - 2, word.end())
    for nino in _NINO.finditer(text):
        start = nino.start() - (3 if text[nino.start() - 1] == " " else 2)
        prefix = text[start : start + 2].upper()
        if prefix[0] not in "DFIQUV" and prefix[1] not in "DFIOQUV" and prefix not in _NOT_NINO:
            yield ("national_id", start, nino.end())
    yield from _named(text)


def _named(text: str) -> Iterator[tuple[str, int, int]]:
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = text
    starts = sorted({m.start() for cue in ("sin", "social", "aadha", "passport") for m in re.finditer(cue, lowered)})
    for start in starts:
        found = _NAMED.match(text, start) if start == 0 or not re.match(r"[\w.]", text[start - 1]) else None
        if found and _named_ok(found.group(1).lower(), found.group(2)):
            yield ("national_id", found.start(2), found.end(2))


def _named_ok(name: str, value: str) -> bool:
    digits = value.replace(" ", "").replace("-", "")
    if name.startswith(("sin", "social")):  # Canada: Luhn, none issued starting 0 or 8
        return re.fullmatch(r"\d{3}([ -]?)\d{3}\1\d{3}", value) is not None and digits[0] not in "08" and _luhn(digits)
    if name.startswith("aadha"):
        return re.fullmatch(r"[2-9]\d{3}([ -]?)\d{4}\1\d{4}", value) is not None and _verhoeff(digits)
    return (
        re.fullmatch(r"[A-Z]?\d{8,9}", value) is not None and len(set(digits.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))) > 1
    )


def _verhoeff(digits: str) -> bool:
    """Verhoeff's check: each digit permuted by its place, combined in the dihedral group D5."""
    check = 0
    for place, ch in enumerate(reversed(digits)):
        digit = int(ch)
        for _ in range(place % 8):
            digit = (1, 5, 7, 6, 2, 8, 3, 0, 9, 4)[digit]
        check = (check + digit) % 5 + 5 * (digit >= 5) if check < 5 else (check - digit) % 5 + 5 * (digit < 5)
    return check == 0


def _mod97(compact: str) -> bool:
    remainder = 0
    for ch in compact[4:] + compact[:4]:
        for digit in str(int(ch, 36)):
            remainder = (remainder * 10 + int(digit)) % 97
    return remainder == 1
