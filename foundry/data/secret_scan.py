"""The gate's second opinion on personal data and secrets, independent of the scrubber's detectors.

`pii_patterns` finds each kind with one expression per shape and a check. This module shares none of
that code: it cuts the text into words, `key = value` pairs, URLs and digit groups, and judges each
with its own rules: the words of a key's name (`SecretAccessKey` is "secret access key"), the value's
entropy and character classes, a vendor prefix table, `urllib.parse` for URLs and query strings, and
its own Luhn, mod-97, SSN and NINO checks. A secret either misses is one the gate still has a second
chance at; kinds are named as in `pii.KINDS`, so `data.pii_allowed` speaks for both.

Placeholders the scrubber wrote (`<SECRET>`) and templates (`${TOKEN}`, `{password}`, `%s`) are not values.
"""

from __future__ import annotations

import base64
import math
import re
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Finding", "kinds", "scan"]


@dataclass(frozen=True)
class Finding:
    kind: str
    start: int  # in the text with string joins taken out
    end: int


# Prefix -> (kind, least length of the whole token).
_PREFIXES = {
    "AKIA": ("aws_access_key", 20), "ASIA": ("aws_access_key", 20), "ghp_": ("github_token", 40),
    "gho_": ("github_token", 40), "ghs_": ("github_token", 40), "ghu_": ("github_token", 40),
    "ghr_": ("github_token", 40), "github_pat_": ("github_token", 60), "glpat-": ("gitlab_token", 26),
    "xoxb-": ("slack_token", 20), "xoxp-": ("slack_token", 20), "xoxa-": ("slack_token", 20),
    "xapp-": ("slack_token", 20), "sk_live_": ("stripe_key", 30), "rk_live_": ("stripe_key", 30),
    "sk_test_": ("stripe_key", 30), "whsec_": ("stripe_key", 30), "AIza": ("google_api_key", 39),
    "sk-": ("api_token", 35), "hf_": ("api_token", 33), "api_org_": ("api_token", 38), "npm_": ("api_token", 40),
    "pypi-": ("api_token", 60), "SG.": ("api_token", 60), "GOCSPX-": ("api_token", 30), "ya29.": ("api_token", 35),
    "glsa_": ("api_token", 40), "hvs.": ("api_token", 28), "dckr_pat_": ("api_token", 36), "shpat_": ("api_token", 38),
    "lin_api_": ("api_token", 48), "dop_v1_": ("api_token", 71), "gsk_": ("api_token", 56), "r8_": ("api_token", 40),
    "AGE-SECRET-KEY-1": ("api_token", 74), "xai-": ("api_token", 60), "sq0atp-": ("api_token", 29),
    "LS0tLS1CRUdJTi": ("private_key", 40),
}  # fmt: skip
_WORD = re.compile(r"[A-Za-z0-9_+/=.~:-]{16,}")
_PAIR = re.compile(
    r"(?<![\w.$-])([A-Za-z_][\w.-]{1,60})[\"']?[ \t]*(?::=|=>|=|:)[ \t]*"
    r"(?:\"([^\"\n]{1,300})\"|'([^'\n]{1,300})'|([^\s\"',;()\[\]{}<>]{1,300}))"
)
_URL = re.compile(r"://(?<=[A-Za-z0-9]://)[^\s\"'<>`]+")
_GLUE = re.compile(r"[\"'][ \t]*\+?[ \t]*\\?\n[ \t]*\+?[ \t]*[\"']|\\\n[ \t]*")
_DIGITS = re.compile(r"\d(?<![\w.+/-]\d)[\d .\-/]{7,30}\d(?![\w]|[.\-/]\d)")
_IBAN = re.compile(
    r"\d(?<=[A-Za-z]{2}\d)(?<![\w-][A-Za-z]{2}\d)\d(?:[ ]?[A-Za-z0-9]{4}){2,7}(?:[ ]?[A-Za-z0-9]{1,3})?(?![\w-])"
)
_NINO = re.compile(
    r"\d(?:(?<=[A-Za-z]{2}\d)(?<![\w-][A-Za-z]{2}\d)|(?<=[A-Za-z]{2} \d)(?<![\w-][A-Za-z]{2} \d))"
    r"\d ?\d\d ?\d\d ?[A-Da-d](?![\w-])"
)
_NOT_NINO = ("BG", "GB", "NK", "KN", "TN", "NT", "ZZ")
_SECRET_WORDS = {"password", "passwd", "passphrase", "pwd", "pass", "secret", "token", "credential", "credentials"}
_SECRET_WORDS |= {"apikey", "auth"}
_KEY_QUALIFIERS = {
    "api",
    "access",
    "secret",
    "private",
    "account",
    "client",
    "master",
    "signing",
    "encryption",
    "session",
}
_QUERY_SECRETS = {"access_token", "refresh_token", "id_token", "token", "api_key", "apikey", "key", "secret", "sig"}
_QUERY_SECRETS |= {"signature", "client_secret", "password", "x-amz-signature", "x-amz-security-token", "auth"}


def kinds(text: str) -> set[str]:
    return {finding.kind for finding in scan(text)}


def scan(text: str) -> Iterator[Finding]:
    """Every secret or piece of personal data found, by kind; offsets are in `text` with string joins removed."""
    flat = _GLUE.sub("", text)
    for scanner in (_private_keys, _tokens, _pairs, _settings, _words, _urls, _headers, _emails, _numbers, _ids):
        yield from scanner(flat)


def _cue_lines(text: str, cues: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, end) of each line holding one of `cues` (lowercased): only those lines are examined."""
    lowered, lines = text.lower(), set()
    if len(lowered) != len(text):
        return [(0, len(text))]
    for cue in cues:
        at = lowered.find(cue)
        while at >= 0:
            start, end = text.rfind("\n", 0, at) + 1, text.find("\n", at)
            lines.add((start, len(text) if end < 0 else end))
            at = lowered.find(cue, at + 1)
    return sorted(lines)


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _placeholder(value: str) -> bool:
    return bool(re.search(r"^<[A-Z_]+>$|[{}]|^\$|\$\(|%[sdr(]|^\*+$|^x+$|^\.\.\.|<[A-Z_]+>", value))


def _random(value: str, least: int = 8) -> bool:
    """Long enough, no spaces, letters with digits or symbols, entropy of a random string, not a dotted name."""
    if len(value) < least or _placeholder(value) or " " in value or not re.search(r"[A-Za-z]", value):
        return False
    if re.fullmatch(r"[A-Za-z_]+|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|0[xob][0-9a-fA-F_]+", value):  # names, literals
        return False
    mixed = re.search(r"\d", value) or re.search(r"[^A-Za-z]", value) or (value.lower() != value != value.upper())
    return bool(mixed) and _entropy(value) >= 2.5


def _private_keys(text: str) -> Iterator[Finding]:
    for found in re.finditer(r"BEGIN[ A-Z0-9]*PRIVATE KEY", text):
        yield Finding("private_key", found.start(), found.end())


def _tokens(text: str) -> Iterator[Finding]:
    if "eyJ" not in text and not any(prefix in text for prefix in _PREFIXES):
        return
    for word in _WORD.finditer(text):
        value = word.group().strip(".:=")
        for prefix, (kind, least) in _PREFIXES.items():
            at = value.find(prefix)
            if at < 0 or (at > 0 and value[at - 1].isalnum()):
                continue
            token = value[at:]
            if len(token) >= least and _entropy(token[len(prefix) :]) >= 3 and _prefix_ok(prefix, token):
                yield Finding(kind, word.start() + at, word.end())
                break
        if value.count(".") == 2 and value.startswith("eyJ") and _jwt(value):
            yield Finding("jwt", word.start(), word.end())


def _prefix_ok(prefix: str, token: str) -> bool:
    if prefix == "LS0tLS1CRUdJTi":
        return b"PRIVATE KEY" in _b64(token)
    if prefix in ("AKIA", "ASIA"):
        return re.fullmatch(r"[A-Z0-9]{20}", token) is not None
    return re.fullmatch(r"[A-Za-z0-9_./+=~-]+", token) is not None and not token.endswith("_")


def _b64(value: str) -> bytes:
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_")
    except ValueError:
        return b""


def _jwt(value: str) -> bool:
    return _b64(value.split(".")[0]).lstrip().startswith(b"{") and b"alg" in _b64(value.split(".")[0])


def _name_words(name: str) -> list[str]:
    """`SecretAccessKey`, `secret_access_key` and `secret-access-key` are all ["secret", "access", "key"]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name.split(".")[-1])
    return [w for w in re.split(r"[\s_\-]+", spaced.lower()) if w]


def _pairs(text: str) -> Iterator[Finding]:
    cues = ("pass", "pwd", "secret", "token", "auth", "key", "credential", "ssn", "nino")
    for pair in (p for start, end in _cue_lines(text, cues) for p in _PAIR.finditer(text, start, end)):
        words = _name_words(pair.group(1))
        quoted = pair.group(2) or pair.group(3)
        value = quoted or pair.group(4)
        kind = _pair_kind(words, value, quoted is not None, text, pair)
        if kind:
            yield Finding(kind, pair.start(), pair.end())


def _settings(text: str) -> Iterator[Finding]:
    """`name=value` items of connection strings (`Server=db;Pwd=...;AccountKey=...`), inside quotes or not."""
    for start, end in _cue_lines(text, (";",)):
        for item in re.finditer(r"([A-Za-z][\w ]{0,40})=([^;\"'\s]+)", text[start:end]):
            words = _name_words(item.group(1).strip())
            if words and words[-1] in ("pwd", "password", "key", "secret") and _random(item.group(2), 6):
                yield Finding(_provider(words), start + item.start(), start + item.end())


def _words(text: str) -> Iterator[Finding]:
    """netrc (`machine h login u password p`) and command lines (`--password p`): a keyword, then its value."""
    for found in re.finditer(r"(?<!\S)(password|--password|--token|--api-key|aws_secret_access_key)[ \t]+(\S+)", text):
        keyword, value = found.groups()
        if keyword == "aws_secret_access_key" and _random(value, 40):  # aws configure set aws_secret_access_key ...
            yield Finding("aws_secret_key", found.start(), found.end())
        before = text[max(0, found.start() - 200) : found.start()].split()[-4:]
        if keyword == "password" and ("machine" in before or "login" in before):
            if not _placeholder(value) and not re.match(r"[=:(\"',]", value):  # `password = ''` is code
                yield Finding("secret_assignment", found.start(), found.end())
        elif keyword.startswith("--") and _random(value, 6):
            yield Finding("secret_assignment", found.start(), found.end())


def _pair_kind(words: list[str], value: str, quoted: bool, text: str, pair: re.Match) -> str | None:
    if not words or _placeholder(value):
        return None
    if words[-1] in ("ssn", "nino") and re.fullmatch(r"[A-Za-z]{0,2}\d{6,9}[A-Da-d]?", value.replace(" ", "")):
        return "national_id"
    last, strong = words[-1], words[-1].endswith(("password", "passwd", "passphrase", "secret"))
    if strong or last.endswith(("token", "pass", "pwd")):  # PGPASSWORD, GITHUBTOKEN
        last = next(w for w in sorted(_SECRET_WORDS, key=len, reverse=True) if last.endswith(w))
    keyish = last == "key" and len(words) > 1 and words[-2] in _KEY_QUALIFIERS
    keyish = keyish or words[-3:] == ["private", "key", "id"]
    if not (last in _SECRET_WORDS or keyish or (last == "data" and "key" in words)):
        return None
    bare_line = not quoted and not text[pair.end() : text.find("\n", pair.end()) % (len(text) + 1)].strip()
    if strong and (quoted or bare_line) and len(value) >= 6 and not _code(value, quoted, text, pair):
        return _provider(words)
    line_start = text.rfind("\n", 0, pair.start()) + 1
    env_prefix = not text[line_start : pair.start()].strip() and "=" in text[pair.end(1) : pair.end(1) + 1]
    if _random(value, 8) and (quoted or bare_line or env_prefix or text[pair.end() : pair.end() + 1] == ";"):
        return _provider(words)
    return None


def _code(value: str, quoted: bool, text: str, pair: re.Match) -> bool:
    """A bare identifier after a spaced `=` is Python assigning a variable, not a secret."""
    spaced = re.search(r"\s=\s", text[pair.start(1) : pair.end()]) is not None
    return not quoted and spaced and re.fullmatch(r"[A-Za-z_][\w.]*", value) is not None


def _provider(words: list[str]) -> str:
    if "aws" in words or words[-2:] in (["access", "key"], ["session", "token"]) and "secret" in words + ["session"]:
        return "aws_secret_key"
    if words[-2:] == ["account", "key"] or "shared" in words:
        return "azure_key"
    return "secret_assignment"


def _urls(text: str) -> Iterator[Finding]:
    for url in _URL.finditer(text):
        try:
            parts = urllib.parse.urlsplit("x" + url.group().rstrip(".,);"))
            password, user = parts.password, parts.username
        except ValueError:
            continue
        if (password and not _placeholder(password)) or (user and not password and _random(user, 20)):
            yield Finding("url_credentials", url.start(), url.end())
            continue
        for name, value in urllib.parse.parse_qsl(parts.query):
            if name.lower() in _QUERY_SECRETS and _random(value, 16 if name.lower() in ("key", "sig", "token") else 8):
                yield Finding("url_credentials", url.start(), url.end())
                break
    for query in re.finditer(r"[?&](access_token|sig|signature|X-Amz-Signature|client_secret)=([^&\s\"'#]+)", text):
        if _random(urllib.parse.unquote(query.group(2)), 8):
            yield Finding("url_credentials", query.start(), query.end())


def _headers(text: str) -> Iterator[Finding]:
    pattern = r"(?i)(authorization|x-api-key|api-key|x-auth-token|private-token)[\"']?\s*[:=,]\s*[\"']?((?:bearer|basic|token)\s+)?([A-Za-z0-9._~+/=-]+)(?![(\[\w.])"
    cues = ("authorization", "api-key", "-token")
    for header in (h for start, end in _cue_lines(text, cues) for h in re.finditer(pattern, text[start:end])):
        value = header.group(3)
        if (header.group(2) or "").strip().lower() == "basic":
            if b":" in _b64(value) and not _placeholder(value):
                yield Finding("auth_header", header.start(), header.end())
        elif _random(value, 8):
            yield Finding("auth_header", header.start(), header.end())
    for bearer in re.finditer(r"\bBearer\s+([A-Za-z0-9._~+/-]{16,}=*)", text):
        if _random(bearer.group(1), 16):
            yield Finding("auth_header", bearer.start(), bearer.end())


def _emails(text: str) -> Iterator[Finding]:
    for at in re.finditer(r"@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}(?![\w-])", text):
        local = re.search(r"[A-Za-z0-9][\w.%+-]*\Z", text[max(0, at.start() - 64) : at.start()])
        if local is not None:
            yield Finding("email", at.start() - len(local.group()), at.end())


def _numbers(text: str) -> Iterator[Finding]:
    """Digit groups: cards (Luhn, one separator throughout), SSNs (3-2-4) and phones (a leading +)."""
    for run in _DIGITS.finditer(text):
        value = run.group().strip()
        separators = set(re.findall(r"[ .\-/]", value))
        digits = re.sub(r"\D", "", value)
        if len(separators) <= 1 and 13 <= len(digits) <= 19 and _luhn(digits) and _card_groups(value):
            yield Finding("credit_card", run.start(), run.end())
        elif re.fullmatch(r"\d{3}([- ])\d\d\1\d{4}", value) and _ssn(digits):
            yield Finding("national_id", run.start(), run.end())
    for phone in re.finditer(r"\+(?<![\w+]\+)[1-9][\d ().-]{6,20}\d(?![\w.]\d|\w)", text):
        decimal = re.fullmatch(r"\+\d+\.\d+", phone.group()) is not None  # Decimal('+35236450.6')
        if 8 <= sum(ch.isdigit() for ch in phone.group()) <= 15 and not decimal:
            yield Finding("phone", phone.start(), phone.end())


def _card_groups(value: str) -> bool:
    groups = re.split(r"[ .\-/]", value)
    return len(groups) == 1 or all(len(g) >= 4 for g in groups[:-1])


def _luhn(digits: str) -> bool:
    doubled = [int(d) * (1 + i % 2) for i, d in enumerate(reversed(digits))]
    return sum(d // 10 + d % 10 for d in doubled) % 10 == 0


def _ssn(digits: str) -> bool:
    return digits[:3] not in ("000", "666") and digits[3:5] != "00" and digits[5:] != "0000" and digits[0] != "9"


def _ids(text: str) -> Iterator[Finding]:
    """IBANs (any case, mod 97) and UK National Insurance numbers, found from their first digit (rarer
    than letters), two letters before it."""
    for word in _IBAN.finditer(text):
        compact = text[word.start() - 2 : word.end()].replace(" ", "").upper()
        if 15 <= len(compact) <= 34 and _mod97(compact):
            yield Finding("iban", word.start() - 2, word.end())
    for nino in _NINO.finditer(text):
        start = nino.start() - (3 if text[nino.start() - 1] == " " else 2)
        prefix = text[start : start + 2].upper()
        if prefix[0] not in "DFIQUV" and prefix[1] not in "DFIOQUV" and prefix not in _NOT_NINO:
            yield Finding("national_id", start, nino.end())


def _mod97(compact: str) -> bool:
    remainder = 0
    for ch in compact[4:] + compact[:4]:
        for digit in str(int(ch, 36)):
            remainder = (remainder * 10 + int(digit)) % 97
    return remainder == 1
