"""The gate's second opinion on personal data and secrets, independent of the scrubber's detectors.

`pii_patterns` finds each kind with one expression per shape and a check. This module shares none of
that code: it cuts the text into words, `key = value` pairs, URLs and digit groups, and judges each
with its own rules: the words of a key's name (`SecretAccessKey` is "secret access key"), the value's
entropy and character classes, a vendor prefix table, `urllib.parse` for URLs and query strings, and,
for numbers (card numbers, US SSNs, IBANs, UK National Insurance numbers, and after their names Canadian
SINs, Aadhaar and passport numbers), its own Luhn, mod-97, SSN and NINO checks; private and documentation
IPv4 addresses by integer arithmetic on their octets. A secret either misses is
one the gate still has a second chance at; kinds are named as in `pii.KINDS`, so `data.pii_allowed`
speaks for both.

Placeholders the scrubber wrote (`<SECRET>`) and templates (`${TOKEN}`, `{password}`, `%s`) are not values.
"""

from __future__ import annotations

import base64
import datetime
import math
import re
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Finding", "joined", "kinds", "scan"]


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
    "LS0tLS1CRUdJTi": ("private_key", 40), "key-": ("api_token", 36),
}  # fmt: skip
_PREFIX_AT = re.compile("|".join(re.escape(prefix) for prefix in sorted(_PREFIXES, key=len, reverse=True)))
_WORD = re.compile(r"[A-Za-z0-9_+/=.~:-]{16,}")
_PAIR = re.compile(
    r"(?<![\w.$-])([A-Za-z_][\w.-]{1,60})[\"']?[ \t]*(?::=|=>|=|:)[ \t]*"
    r"(?:\"([^\"\n]{1,300})\"|'([^'\n]{1,300})'|([^\s\"',;()\[\]{}<>]{1,300}))"
)
_URL = re.compile(r"://(?<=[A-Za-z0-9]://)[^\s\"'<>`]+")
# A line ending in part of a token (`ghp_Ab3De6`) that the next line continues: a hard wrap, joined.
_WRAPPED = re.compile(r"\n[ \t]*(?=[A-Za-z0-9_-])")
_GLUE = re.compile(r"[\"'][ \t]*\+?[ \t]*\\?\n[ \t]*\+?[ \t]*[\"']|\\\n[ \t]*")
_SECRET_WORDS = {"password", "passwd", "passphrase", "pwd", "pass", "secret", "token", "credential", "credentials"}
_SECRET_WORDS |= {"apikey", "auth"}
_KEY_QUALIFIERS = {"api", "access", "secret", "private", "account", "client", "master", "signing", "encryption"}
_KEY_QUALIFIERS |= {"session"}
_QUERY_SECRETS = {"access_token", "refresh_token", "id_token", "token", "api_key", "apikey", "key", "secret", "sig"}
_QUERY_SECRETS |= {"signature", "client_secret", "password", "x-amz-signature", "x-amz-security-token", "auth"}


def kinds(text: str) -> set[str]:
    return {finding.kind for finding in scan(text)}


def joined(text: str) -> str:
    """`text` with string joins (`"ab"\\n "cd"`, a backslash-newline) and hard wraps inside a token taken out:
    what `scan`'s offsets index."""
    flat = _GLUE.sub("", text)
    parts, at = [], 0
    for end in sorted({end for prefix in _PREFIXES for end in _line_ends_in_token(flat, prefix)}):
        parts.append(flat[at:end])
        at = _WRAPPED.match(flat, end).end()
    return "".join(parts) + flat[at:]


def _line_ends_in_token(text: str, prefix: str) -> Iterator[int]:
    """The newline of each line whose last word starts with `prefix` and that the next line continues."""
    at = text.find(prefix)
    while at >= 0:
        end = text.find("\n", at)
        whole = at == 0 or not (text[at - 1].isalnum() or text[at - 1] == "_")
        if whole and end > 0 and re.fullmatch(r"[\w.~+/=:-]+", text[at:end], re.ASCII) and _WRAPPED.match(text, end):
            yield end
        at = text.find(prefix, at + 1)


def scan(text: str) -> Iterator[Finding]:
    """Every secret or piece of personal data found, by kind; offsets are in `joined(text)`."""
    flat = joined(text)
    for scanner in (_private_keys, _tokens, _pairs, _settings, _words, _urls, _headers, _emails):
        yield from scanner(flat)
    for kind, start, end in (*_numbers(flat), *_ids(flat), *_births(flat), *_addresses(flat)):
        yield Finding(kind, start, end)


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
    """A template, a mask, markup or a word that stands for no value (`<SECRET>`, `${X}`, `****`, `b`, `null`)."""
    if len(set(value)) <= 1 or value.lower() in ("none", "null", "nil", "true", "false", "undefined", "required"):
        return True
    return bool(re.search(r"^<|[{}`…]|^\$|\$\(|%[sdr(]|^\*+$|^x+$|^\.\.\.|://", value))


def _wordy(value: str) -> bool:
    """Words and names, not a random string: `Updated.`, `x-api-key`, `self.password`, `getApplyTensor`, a path."""
    if re.fullmatch(r"(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?|[A-Za-z]:\\.*", value):  # /home/u/src, C:\\Users
        return True
    parts = [part for part in re.split(r"[-_.:/]+", value) if part]
    if not parts or not all(part.isalpha() for part in parts):
        return False
    switches = sum(a.islower() != b.islower() for a, b in zip(value, value[1:]) if a.isalpha() and b.isalpha())
    return len(parts) > 1 or len(value) < 16 or switches < len(value) / 3  # random letters change case often


def _random(value: str, least: int = 8) -> bool:
    """Long enough, no spaces, letters with digits or symbols, entropy of a random string, not words or a name."""
    value = value.rstrip(".,;:!?")  # the end of a sentence
    if len(value) < least or _placeholder(value) or " " in value or not re.search(r"[A-Za-z]", value):
        return False
    if _wordy(value) or re.fullmatch(r"0[xob][0-9a-fA-F_]+", value):  # names, paths, literals
        return False
    return _entropy(value) >= 2.5


def _private_keys(text: str) -> Iterator[Finding]:
    for found in re.finditer(r"BEGIN[ A-Z0-9]*PRIVATE KEY", text):
        yield Finding("private_key", found.start(), found.end())


def _tokens(text: str) -> Iterator[Finding]:
    if "eyJ" not in text and not any(prefix in text for prefix in _PREFIXES):
        return
    for word in _WORD.finditer(text):
        value = word.group().strip(".:=")
        for found in _PREFIX_AT.finditer(value):  # one expression, not a `find` per prefix: "key-" is common
            at, prefix = found.start(), found.group()
            kind, least = _PREFIXES[prefix]
            if at > 0 and value[at - 1].isalnum():
                continue
            token = value[at:]
            tail = token[len(prefix) :]
            if len(token) >= least and _entropy(tail) >= 3 and _prefix_ok(prefix, token) and not _wordy(tail):
                yield Finding(kind, word.start() + at, word.end())
                break
        if value.count(".") == 2 and value.startswith("eyJ") and _jwt(value):
            yield Finding("jwt", word.start(), word.end())


def _prefix_ok(prefix: str, token: str) -> bool:
    if prefix == "LS0tLS1CRUdJTi":
        return b"PRIVATE KEY" in _b64(token)
    if prefix == "key-":  # Mailgun: 32 lowercase letters and digits
        return re.fullmatch(r"key-[0-9a-z]{32}", token) is not None and re.search(r"\d", token) is not None
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
        items = list(re.finditer(r"(?<![^\s;\"'])([A-Za-z][\w ]{0,40})=([^;\"'\s]+)(?![^\s;\"'])", text[start:end]))
        for item in items if len(items) > 1 else ():  # a connection string has several settings
            words, value = _name_words(item.group(1).strip()), item.group(2)
            if "=" in value.rstrip("=") or re.search(r"[,<>()]", value):  # code: `for (key=row->keys,pos=k=0;`
                continue
            if words and words[-1] in ("pwd", "password", "key", "secret") and _random(value, 6):
                yield Finding(_provider(words), start + item.start(), start + item.end())


def _words(text: str) -> Iterator[Finding]:
    """netrc (`machine h login u password p`) and command lines (`--password p`): a keyword, then its value."""
    for found in re.finditer(r"(?<!\S)(password|--password|--token|--api-key|aws_secret_access_key)[ \t]+(\S+)", text):
        keyword, value = found.groups()
        if keyword == "aws_secret_access_key" and _random(value, 40):  # aws configure set aws_secret_access_key ...
            yield Finding("aws_secret_key", found.start(), found.end())
        if keyword == "password" and _netrc(text[max(0, found.start() - 300) : found.start()].split()):
            if not _placeholder(value) and not re.match(r"[=:(\"',]", value):  # `password = ''` is code
                yield Finding("secret_assignment", found.start(), found.end())
        elif keyword.startswith("--") and _random(value, 6):
            yield Finding("secret_assignment", found.start(), found.end())


def _netrc(before: list[str]) -> bool:
    """The words before `password` are netrc's own, from its `machine` (`machine h login u`), not prose."""
    at = max((i for i, word in enumerate(before) if word in ("machine", "default")), default=-1)
    rest = before[at + (before[at] == "default") :] if at >= 0 else ["prose"]
    return (
        len(rest) % 2 == 0 and bool(rest) and all(word in ("machine", "login", "account", "port") for word in rest[::2])
    )


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
    """Code or prose, not a setting: a bare identifier after a spaced `=` (Python assigning a variable),
    a dotted name or one naming a secret (`password=self.password`, `passphrase=passphrase`), a bare value
    after something other than indentation, a list dash or `export` (`f(user=u, password=p)`, `* passwd:
    Updated.`), or a word ending a sentence."""
    if quoted:
        return False
    spaced = re.search(r"\s=\s", text[pair.start(1) : pair.end()]) is not None
    name = re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", value) is not None
    named = re.search(r"(?i)pass|pwd|secret|token|key|cred|auth", value) is not None
    if name and (spaced or named or "." in value):
        return True
    before = text[text.rfind("\n", 0, pair.start()) + 1 : pair.start()]
    setting = re.fullmatch(r"[ \t-]*(?:export[ \t]+)?[\"']?", before) is not None
    return not setting or re.fullmatch(r"[A-Za-z]+[.!?,;:]", value) is not None


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
        stand_in = password and re.fullmatch(
            r"[A-Z][A-Z_]*|(?i:(?:my)?(?:password|passwd|pass|pwd|secret|token))", password
        )
        if (password and not _placeholder(password) and not stand_in) or (user and not password and _random(user, 20)):
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
    for header in (h for start, end in _cue_lines(text, cues) for h in re.compile(pattern).finditer(text, start, end)):
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
        local = re.search(r"(?<![\w.%+-])[A-Za-z0-9][\w.%+-]*\Z", text[max(0, at.start() - 64) : at.start()])
        if local is not None:
            yield Finding("email", at.start() - len(local.group()), at.end())


# --- numbers: cards, SSNs, IBANs, NINOs; after their names SINs, Aadhaar, passports ----------------------------


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


def _numbers(text: str) -> Iterator[tuple[str, int, int]]:
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


def _ids(text: str) -> Iterator[tuple[str, int, int]]:
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


# Dates of birth: a calendar date (read by `datetime.strptime`) right after a word that says so.
_BIRTH_CUES = ("born", "birth", "dob", "d.o.b")
_BIRTH_GAP = re.compile(r"[\w.]*[^\w\n]{0,5}(?:(?:is|was|on|of)[^\w\n]{1,5})?")
_DATE_WORDS = re.compile(r"[^\s<>\"']+(?:[ ][^\s<>\"']+){0,3}")
_DATE_FORMATS = ("%Y-%m-%d", "%d/%m/%Y", "%m/%d/%Y", "%d.%m.%Y", "%d-%m-%Y", "%m-%d-%Y", "%d/%m/%y", "%m/%d/%y")
_DATE_FORMATS += ("%d.%m.%y", "%d %B %Y", "%d %b %Y", "%B %d %Y", "%b %d %Y", "%d of %B %Y")


def _births(text: str) -> Iterator[tuple[str, int, int]]:
    lowered = text.lower() if len(text.lower()) == len(text) else text
    for cue in _BIRTH_CUES:
        for found in re.finditer(re.escape(cue), lowered):
            if found.start() and (text[found.start() - 1].isalnum() or text[found.start() - 1] == "."):
                continue  # `reborn`, `stubborn`
            at = _BIRTH_GAP.match(text, found.end()).end()
            if span := _date_at(text, at):
                yield ("birth_date", *span)


def _date_at(text: str, at: int) -> tuple[int, int] | None:
    """The longest run of one to four words at `at` that is a calendar date from 1900 to 2100."""
    words = _DATE_WORDS.match(text, at)
    if words is None:
        return None
    parts = words.group().split(" ")
    for n in range(len(parts), 0, -1):
        phrase = " ".join(parts[:n]).rstrip(".,;:)")
        cleaned = re.sub(r"(?<=\d)(?:st|nd|rd|th)\b", "", phrase).replace(",", "")
        for form in _DATE_FORMATS:
            try:
                when = datetime.datetime.strptime(cleaned.rstrip("."), form)
            except ValueError:
                continue
            if 1900 <= when.year <= 2100:
                return at, at + len(phrase)
    return None


# Private (RFC 1918) and documentation (RFC 5737) IPv4 addresses, as (first address, prefix length), 32-bit integers; each
# block's own first address (`10.0.0.0/8`) names the block, not a host. Loopback and link-local name no network.
_PRIVATE_BLOCKS = [(10 << 24, 8), (172 << 24 | 16 << 16, 12), (192 << 24 | 168 << 16, 16), (192 << 24 | 2 << 8, 24)]
_PRIVATE_BLOCKS += [(198 << 24 | 51 << 16 | 100 << 8, 24), (203 << 24 | 113 << 8, 24)]
_QUAD = re.compile(r"(?<![\w.])([0-9]+)\.([0-9]+)\.([0-9]+)\.([0-9]+)(?!\w|\.\d)")
# Words after which a dotted number is a version or a section: `version 10.0.0.1`, `section 10.1.2.3`.
_NUMBER_WORDS = {"version", "ver", "release", "build", "rev", "revision", "section", "sect", "sec", "chapter"}
_NUMBER_WORDS |= {"clause", "paragraph", "para", "article", "step", "figure", "fig", "table", "appendix"}


def _addresses(text: str) -> Iterator[tuple[str, int, int]]:
    for quad in _QUAD.finditer(text) if any(first in text for first in ("10.", "172.", "192.", "198.", "203.")) else ():
        octets = quad.groups()
        if any(len(o) > 3 or int(o) > 255 or (len(o) > 1 and o[0] == "0") for o in octets):
            continue  # 192.168.1.300, 10.01.0.1: no address
        number = sum(int(o) << shift for o, shift in zip(octets, (24, 16, 8, 0)))
        blocks = [first for first, bits in _PRIVATE_BLOCKS if number >> (32 - bits) == first >> (32 - bits)]
        low = max(0, quad.start() - 40)  # the words just before it, on its line
        line = max(text.rfind("\n", low, quad.start()) + 1, low)
        if blocks and number not in blocks and not _numbered(text[line : quad.start()]):
            yield ("private_ipv4", quad.start(), quad.end())


def _numbered(before: str) -> bool:
    """The line before the number ends in a word that makes it a version or a section (a few quotes,
    spaces, `=`, `:`, `_` or `.` between)."""
    word = before.rstrip(" \t\"'=:_.")
    if len(before) - len(word) > 6:
        return False
    if word.endswith("§"):
        return True
    letters = re.search(r"[A-Za-z]*\Z", word).group()
    return letters.lower() in _NUMBER_WORDS
