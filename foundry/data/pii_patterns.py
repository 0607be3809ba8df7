"""What each PII detector matches: a regular expression, a cheap test that rules it out, and a check.

Tuned to leave source code alone: the default corpus is Python, where `a[1::2]`, version strings,
long integer constants, `password = getpass()` and `PEM_HEADER = "-----BEGIN CERTIFICATE-----"`
must not read as personal data or secrets. Each expression starts with a literal or a character
class, never a look-behind, so the regex engine skips ahead to candidate characters instead of
trying every position (10x faster); a boundary look-behind comes right after the first character.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from collections.abc import Callable

PLACEHOLDERS = {
    "private_key": "<PRIVATE_KEY>",
    "pem_block": "<PEM_BLOCK>",
    "aws_access_key": "<AWS_ACCESS_KEY>",
    "aws_secret_key": "<AWS_SECRET_KEY>",
    "github_token": "<GITHUB_TOKEN>",
    "gitlab_token": "<GITLAB_TOKEN>",
    "slack_token": "<SLACK_TOKEN>",
    "stripe_key": "<STRIPE_KEY>",
    "google_api_key": "<GOOGLE_API_KEY>",
    "jwt": "<JWT>",
    "secret_assignment": "<SECRET>",
    "email": "<EMAIL>",
    "iban": "<IBAN>",
    "credit_card": "<CREDIT_CARD>",
    "ipv6": "<IPV6>",
    "ipv4": "<IPV4>",
    "phone": "<PHONE>",
}
KINDS = tuple(PLACEHOLDERS)  # also the order they run in: longer, more specific patterns first

_SECRET_NAME = (
    r"(?i:passw(?:or)?d|passphrase|(?:client[_-]?)?secret(?:[_-]?key)?|api[_-]?(?:key|token)|apikey"
    r"|(?:access|auth)[_-]?token|private[_-]?key)"
)
PATTERNS = {
    # A block cut off before its END line is still a key: take it to the end of the document.
    "private_key": re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        re.DOTALL,
    ),
    # Any other armoured block (certificate, public key, request, PGP message or signature): header
    # lines, then base64 lines, then the END line of the same label; a bare BEGIN line is not a block.
    "pem_block": re.compile(
        r"-----BEGIN (?P<label>[A-Z0-9]+(?: [A-Z0-9]+)*)-----[ \t]*\r?\n(?:[A-Za-z0-9-]+:[^\r\n]*\r?\n)*"
        r"(?:[ \t]*\r?\n)?(?:[A-Za-z0-9+/=]{1,120}[ \t]*\r?\n)+-----END (?P=label)-----"
    ),
    "aws_access_key": re.compile(
        r"A(?<![A-Z0-9]A)(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA|3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])"
    ),
    # A secret key is 40 characters of base64: too common a shape to catch without its name beside it.
    "aws_secret_key": re.compile(
        r"(?i:aws_?secret_?(?:access_?)?key)[\"']?\s*[:=]\s*[\"']?(?P<span>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
    ),
    # Classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained (github_pat_) tokens.
    "github_token": re.compile(
        r"g(?<![A-Za-z0-9_]g)(?:h[pousr]_[A-Za-z0-9]{36}|ithub_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59})(?![A-Za-z0-9_])"
    ),
    # Personal, deploy, feed, service-account, runner, CI-job, incoming-mail, trigger, agent and OAuth tokens.
    "gitlab_token": re.compile(
        r"(?:g(?<![\w-]g)l(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|G(?<![\w-]G)R1348941)[A-Za-z0-9_-]{20,}(?![\w-])"
    ),
    "slack_token": re.compile(
        r"(?:x(?<![\w-]x)(?:ox[abposre]|app)-[0-9A-Za-z-]{10,}"
        r"|https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/-]{20,})(?![\w-])"
    ),
    # Secret and restricted keys, live or test, and webhook signing secrets; publishable keys are public.
    "stripe_key": re.compile(
        r"(?:[sr](?<![A-Za-z0-9_][sr])k_(?:live|test)_|w(?<![A-Za-z0-9_]w)hsec_)[0-9A-Za-z]{24,}(?![0-9A-Za-z])"
    ),
    "google_api_key": re.compile(r"A(?<![\w-]A)Iza[0-9A-Za-z_-]{35}(?![\w-])"),
    # Header and payload are base64url JSON objects, so both start "eyJ" ('{"'); checked below.
    "jwt": re.compile(r"e(?<![\w-]e)yJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*(?![\w-])"),
    # name = "value", name: 'value', "name": "value", NAME=value: the value is replaced, the name kept.
    "secret_assignment": re.compile(
        _SECRET_NAME + r"[\"']?[ \t]*(?P<sep>:=|=>|=|:)[ \t]*"
        r"(?:(?P<q>[\"'])(?P<span>[^\"'\r\n]{6,200})(?P=q)|(?P<bare>[^\s\"'`,;()\[\]{}<>]{6,200}))"
    ),
    # Found from the "@"; the part before it is matched backwards by LOCAL_PART.
    "email": re.compile(r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"),
    # Country, check digits, then groups of four (optionally one space apart); checked by mod 97 below.
    "iban": re.compile(r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z]\d\d(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])"),
    # 13 to 19 digits, optionally in groups split by one space or dash; checked with Luhn below.
    "credit_card": re.compile(r"[2-6](?<![\w.+-][2-6])\d{3}(?:[ -]?\d){9,15}(?![\w-]|\.\d)"),
    # Found from the first colon; up to four hex digits before it are taken in by extend_ipv6.
    "ipv6": re.compile(r":(?:[0-9A-Fa-f]{0,4}:){1,6}[0-9A-Fa-f]{0,4}(?![\w:])"),
    "ipv4": re.compile(r"\d(?<![\w.]\d)\d{0,2}(?:\.\d{1,3}){3}(?!\w|\.\d)"),
    # International (+CC ...) or North American ((555) 123-4567, 555-123-4567, 555.123.4567); bare
    # digit runs are left alone: in code they are constants far more often than telephones.
    "phone": re.compile(
        r"[+(\d](?<![\w+.-][+(\d])(?:(?<=\+)\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]\d{2,4}){1,4}"
        r"|(?<=\()\d{3}\)[ .-]?\d{3}[ .-]\d{4}|(?<=\d)\d{2}([.-])\d{3}\1\d{4})(?![\w.-]\d|\w)"
    ),
}
LOCAL_PART = re.compile(r"(?<![\w.%+-])[A-Za-z0-9][\w.%+-]{0,63}\Z")
HEX = frozenset("0123456789abcdefABCDEF")
_AWS_PREFIXES = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "A3T")
# Every name _SECRET_NAME matches holds one of these (lowercased): one scan each, 10x cheaper than the expression.
_SECRET_WORDS = ("passw", "passphrase", "secret", "api_key", "apikey", "api-key", "api_token", "api-token")
_SECRET_WORDS += ("access_token", "access-token", "accesstoken", "auth_token", "auth-token", "authtoken")
_SECRET_WORDS += ("private_key", "private-key", "privatekey")
_GITLAB_PREFIXES = ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-")


def _has(*parts: str) -> Callable[[str], bool]:
    return lambda text: any(p in text for p in parts)


# Cheap tests that rule a detector out without running its expression.
NEEDS: dict[str, Callable[[str], bool]] = {
    "private_key": _has("PRIVATE KEY"),
    "pem_block": _has("-----BEGIN "),
    "aws_access_key": _has(*_AWS_PREFIXES),
    "aws_secret_key": _has("ecret", "ECRET"),
    "github_token": _has("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": _has(*_GITLAB_PREFIXES, "GR1348941"),
    "slack_token": _has("xox", "xapp-", "hooks.slack.com"),
    "stripe_key": _has("k_live_", "k_test_", "whsec_"),
    "google_api_key": _has("AIza"),
    "jwt": _has("eyJ"),
    "secret_assignment": lambda t: any(w in t.lower() for w in _SECRET_WORDS),
    "email": _has("@"),
}

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
_NOT_SECRETS = {"none", "null", "nil", "true", "false", "undefined", "required", "optional", "changeme"}


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def iban_ok(value: str) -> bool:
    """Registered length for its country and ISO 7064 mod-97 check (the number, rearranged, leaves 1)."""
    compact = value.replace(" ", "")
    if IBAN_LENGTHS.get(compact[:2]) != len(compact):
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


def secret_value_ok(text: str, match: re.Match) -> bool:
    """A quoted value, or a bare one on a line of its own (`NAME=value`, `name: value`, as in .env, YAML
    or INI files) that does not read as code: no call, no reserved word, and an identifier only after
    `=` with no spaces or after a colon (a spaced `name = word` is far more often Python than a secret)."""
    value = match.group("span") or match.group("bare")
    if value.lower() in _NOT_SECRETS or value[0] in "<$%{/" or len(set(value)) == 1:
        return False  # placeholders, templates, paths, masks such as ******
    if match.group("span"):
        return True
    line_start = text.rfind("\n", 0, match.start()) + 1
    line_end = text.find("\n", match.end())
    before, after = text[line_start : match.start()], text[match.end() : None if line_end < 0 else line_end]
    if after.strip() or not re.fullmatch(r"[ \t]*(?:export[ \t]+)?[A-Za-z0-9_.-]*", before):
        return False
    identifier = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", value) is not None
    spaced = text[match.start("sep") - 1] in " \t" or text[match.end("sep")] in " \t"
    return not identifier or match.group("sep") == ":" or not spaced


def valid(kind: str, value: str, text: str, match: re.Match) -> bool:
    if kind == "pem_block":
        return "PRIVATE KEY" not in match.group("label")  # those are private_key's, cut off or not
    if kind == "credit_card":
        digits = re.sub(r"[ -]", "", value)
        return 13 <= len(digits) <= 19 and luhn_ok(digits)
    if kind == "iban":
        return iban_ok(value)
    if kind == "jwt":
        return jwt_ok(value)
    if kind == "secret_assignment":
        return secret_value_ok(text, match)
    if kind == "ipv4":
        return ip_identifies_someone(value)
    if kind == "ipv6":
        # At least three groups: `a[1::2]` and `12:30` are not addresses.
        return sum(1 for group in value.split(":") if group) >= 3 and ip_identifies_someone(value)
    if kind == "phone":
        return 7 <= sum(ch.isdigit() for ch in value) <= 15
    return True
