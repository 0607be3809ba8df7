"""The checks behind the PII detectors of `pii_patterns`: a candidate the expression found is kept only
when its check agrees (Luhn, mod 97, a JSON header, a global address, a private or documentation address that is
no version or section number, a value that reads as a secret).

A value beside a weak name (`token`, `auth`, `pass`, `pwd`) must look like a secret, not like code: at
least 8 characters, no spaces, not a word, a dotted name or a call, and mixed characters or high entropy.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import re
from collections import Counter

# IBAN length by country (ISO 13616 registry).
IBAN_LENGTHS = dict(
    (entry[:2], int(entry[2:]))
    for entry in (
        "AD24 AE23 AL28 AT20 AZ28 BA20 BE16 BG22 BH22 BI27 BR29 BY28 CH21 CR22 CY28 CZ24 DE22 DJ27 DK18 DO28 "
        "EE20 EG29 ES24 FI18 FK18 FO18 FR27 GB22 GE22 GI23 GL18 GR27 GT28 HR21 HU28 IE22 IL23 IQ23 IS26 IT27 "
        "JO30 KW30 KZ20 LB28 LC32 LI21 LT20 LU20 LV21 LY25 MC27 MD24 ME22 MK19 MN20 MR27 MT31 MU30 NI28 NL18 "
        "NO15 OM23 PK24 PL28 PS29 PT25 QA29 RO24 RS22 RU33 SA24 SC31 SD18 SE24 SI19 SK24 SM27 SO23 ST25 SV28 "
        "TL23 TN24 TR26 UA29 VA22 VG24 XK20 YE30"
    ).split()
)
NOT_SECRETS = {"none", "null", "nil", "true", "false", "undefined", "required", "optional", "changeme"}
# Names whose value is a secret only when it looks like one (see the module docstring).
WEAK_NAME = re.compile(r"(?i)(?:[a-z0-9]*[_-])?(?:token|auth|pass|pwd|credentials?)\W*\Z")
_TEMPLATE = re.compile(r"[{}]|\A\$|\$\(|%[sdr(]|\A<.*>\Z|\A\*+\Z|\A[xX.]+\Z|\A\.\.\.")
_NINO_BAD_PREFIXES = {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def iban_ok(value: str) -> bool:
    """Registered length for its country and ISO 7064 mod-97 check (the number, rearranged, leaves 1)."""
    compact = value.replace(" ", "").upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact.isalnum():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def jwt_ok(value: str) -> bool:
    """The header decodes to a JSON object that names its algorithm."""
    header = value.split(".", 1)[0]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(decoded, dict) and "alg" in decoded


def ip_identifies_someone(text: str) -> bool:
    """Loopback, private, link-local, documentation and unspecified addresses identify no one."""
    try:
        return ipaddress.ip_address(text).is_global
    except ValueError:
        return False


# RFC 1918's private blocks and RFC 5737's documentation blocks: an address in them names a host of someone's own
# network (or stands for one). Loopback (127/8) and link-local (169.254/16) are left: the same on every machine or
# link (`127.0.0.1`, the cloud metadata address `169.254.169.254`), they name no network.
PRIVATE_IPV4_BLOCKS = tuple(
    ipaddress.IPv4Network(block)
    for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)
# A dotted number after one of these words is a version or a section (`version 10.0.0.1`, `__version__ = "10.1.2.3"`,
# `section 10.1.2.3`, `§ 192.0.2.1`), not an address. At most 16 characters: searched from there.
_NUMBER_WORDS = re.compile(
    r"(?:(?<![A-Za-z])(?i:version|ver|release|build|rev|revision|section|sect|sec|chapter|clause|paragraph|para|"
    r"article|step|figure|fig|table|appendix)|§)[ \t\"'=:_.]{0,6}\Z"
)
_BLOCKS = tuple((int(block.network_address), int(block.netmask)) for block in PRIVATE_IPV4_BLOCKS)


def private_ipv4_ok(value: str, before: str) -> bool:
    """A private or documentation address (`PRIVATE_IPV4_BLOCKS`), not the name of a block itself (`10.0.0.0/8`,
    `192.0.2.0`), not a number with an invalid octet or a leading zero (`192.168.1.300`), and not after a word
    that makes it a version or a section number; `before` is its line's last 40 characters before it."""
    try:
        number = int(ipaddress.IPv4Address(value))
    except ValueError:
        return False
    inside = any(number & mask == first for first, mask in _BLOCKS)
    return (
        inside
        and all(number != first for first, _ in _BLOCKS)
        and not _NUMBER_WORDS.search(before, max(0, len(before) - 16))
    )


def ssn_ok(value: str) -> bool:
    """US SSN (and ITIN) rules: no 000, 666 or 9xx area (ITINs: 9xx with group 50-65, 70-99), no 00 group, no 0000."""
    digits = re.sub(r"\D", "", value)
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    if area == "000" or area == "666" or group == "00" or serial == "0000":
        return False
    return area[0] != "9" or 50 <= int(group) <= 65 or 70 <= int(group) <= 99


def nino_ok(value: str) -> bool:
    """UK National Insurance number: two prefix letters HMRC issues, six digits, suffix A to D."""
    compact = value.replace(" ", "").upper()
    first, second = compact[0], compact[1]
    return first not in "DFIQUV" and second not in "DFIOQUV" and compact[:2] not in _NINO_BAD_PREFIXES


def entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def templated(value: str) -> bool:
    """A placeholder, a template or a mask, not a value: `<SECRET>`, `${TOKEN}`, `{password}`, `%s`, `****`."""
    return value.lower() in NOT_SECRETS or _TEMPLATE.search(value) is not None or len(set(value)) == 1


def looks_random(value: str, min_len: int = 8) -> bool:
    """A credential rather than a word, a name or code: long enough, no spaces or calls, and either
    letters mixed with digits or symbols, or high entropy."""
    if len(value) < min_len or templated(value) or re.search(r"\s|\(|\)", value):
        return False
    if re.fullmatch(r"[A-Za-z_][A-Za-z_]*|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", value):  # words, self.tok, base64.b64encode
        return False
    if not re.search(r"[A-Za-z]", value):  # numbers, versions, OIDs and dates: '1.3.6.1.5.5.7.3.1'
        return False
    classes = sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"\d", r"[^A-Za-z0-9]"))
    return classes >= 2 and (bool(re.search(r"\d", value)) or entropy(value) >= 3.5)


def basic_auth_ok(value: str) -> bool:
    """HTTP basic credentials: base64 of printable `user:password`."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("ascii")
    except (binascii.Error, ValueError):
        return False
    return ":" in decoded and decoded.isprintable()


def netrc_line(line: str) -> bool:
    """A line of a netrc file: keyword and value pairs (`machine h login u password p`), nothing else."""
    words, at = line.split(), 0
    while at < len(words):
        if words[at] == "default":
            at += 1
        elif words[at] in ("machine", "login", "password", "account", "port") and at + 1 < len(words):
            at += 2
        else:
            return False
    return bool(words)


def weak_name(name: str) -> bool:
    return WEAK_NAME.fullmatch(name) is not None


def line_around(text: str, match: re.Match) -> tuple[str, str]:
    line_start = text.rfind("\n", 0, match.start()) + 1
    line_end = text.find("\n", match.end())
    return text[line_start : match.start()], text[match.end() : None if line_end < 0 else line_end]


def name_of(text: str, match: re.Match) -> str:
    """The whole key name the match's name ends: `DB_PASS` for the `PASS` of `DB_PASS=...`."""
    start = match.start()
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_-."):
        start -= 1
    end = match.start("sep") if "sep" in match.re.groupindex else match.start()
    return text[start:end].strip("\"' \t")
