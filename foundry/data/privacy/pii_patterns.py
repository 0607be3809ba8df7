"""What each PII detector matches: regular expressions, a cheap test that rules them out, and a check.

Tuned to leave source code alone: the default corpus is Python, where `a[1::2]`, version strings,
long integer constants, `password = getpass()`, `token = self._next()` and
`PEM_HEADER = "-----BEGIN CERTIFICATE-----"` must not read as personal data or secrets. Each expression
starts with a literal or a character class, never a look-behind, so the regex engine skips ahead to
candidate characters instead of trying every position (10x faster); a boundary look-behind comes right
after the first character. A kind may have several expressions (the shapes a secret takes in code, JSON,
YAML, `.env`, INI, netrc and connection strings); the checks live in `pii_checks`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from foundry.data.privacy.pii_checks import (
    IBAN_LENGTHS,
    basic_auth_ok,
    iban_ok,
    ip_identifies_someone,
    jwt_ok,
    line_around,
    looks_random,
    luhn_ok,
    name_of,
    netrc_line,
    private_ipv4_ok,
    templated,
    weak_name,
)
from foundry.data.privacy.pii_ids import (
    BIRTH_ANCHORS,
    BIRTH_DATE,
    ID_ANCHORS,
    NATIONAL_IDS,
    birth_date_ok,
    national_id_ok,
)
from foundry.data.privacy.pii_tokens import API_TOKEN, API_TOKEN_MARKERS, SECRET_NAME, SECRET_WORDS

__all__ = ["IBAN_LENGTHS", "KINDS", "NEEDS", "PATTERNS", "PLACEHOLDERS", "iban_ok", "jwt_ok", "luhn_ok", "valid"]

PLACEHOLDERS = {
    "private_key": "<PRIVATE_KEY>",
    "pem_block": "<PEM_BLOCK>",
    "aws_access_key": "<AWS_ACCESS_KEY>",
    "aws_secret_key": "<AWS_SECRET_KEY>",
    "azure_key": "<AZURE_KEY>",
    "github_token": "<GITHUB_TOKEN>",
    "gitlab_token": "<GITLAB_TOKEN>",
    "slack_token": "<SLACK_TOKEN>",
    "stripe_key": "<STRIPE_KEY>",
    "google_api_key": "<GOOGLE_API_KEY>",
    "api_token": "<API_TOKEN>",
    "jwt": "<JWT>",
    "auth_header": "<AUTH_HEADER>",
    "url_credentials": "<URL_CREDENTIALS>",
    "secret_assignment": "<SECRET>",
    "email": "<EMAIL>",
    "national_id": "<NATIONAL_ID>",
    "birth_date": "<BIRTH_DATE>",
    "iban": "<IBAN>",
    "credit_card": "<CREDIT_CARD>",
    "ipv6": "<IPV6>",
    "ipv4": "<IPV4>",
    "private_ipv4": "<PRIVATE_IPV4>",
    "phone": "<PHONE>",
}
KINDS = tuple(PLACEHOLDERS)  # also the order they run in: longer, more specific patterns first
# Kinds that name a token by its own shape: a generic detector (a name, a header, a URL) leaves their values to them.
TOKEN_KINDS = ("aws_access_key", "github_token", "gitlab_token", "slack_token", "stripe_key", "google_api_key")
TOKEN_KINDS += ("api_token", "jwt")

_VALUE = r"(?:(?P<q>[\"'])(?P<span>[^\"'\r\n]{6,200})(?P=q)|(?P<bare>[^\s\"'`,;()\[\]{}<>]{6,200}))"
_HEADER_VALUE = r"[A-Za-z0-9._~+/-]{8,}=*"
PATTERNS: dict[str, tuple[re.Pattern, ...]] = {
    # A block cut off before its END line is still a key: take it to the end of the document. A key whose
    # armour is base64 again (kubeconfig `client-key-data`, Kubernetes secrets) starts "LS0tLS1CRUdJTi".
    "private_key": (
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.DOTALL,
        ),
        re.compile(r"L(?<![A-Za-z0-9+/]L)S0tLS1CRUdJTi[A-Za-z0-9+/]{20,}={0,2}"),
    ),
    # Any other armoured block (certificate, public key, request, PGP message or signature): header
    # lines, then base64 lines, then the END line of the same label; a bare BEGIN line is not a block.
    "pem_block": (
        re.compile(
            r"-----BEGIN (?P<label>[A-Z0-9]+(?: [A-Z0-9]+)*)-----[ \t]*\r?\n(?:[A-Za-z0-9-]+:[^\r\n]*\r?\n)*"
            r"(?:[ \t]*\r?\n)?(?:[A-Za-z0-9+/=]{1,120}[ \t]*\r?\n)+-----END (?P=label)-----"
        ),
    ),
    "aws_access_key": (
        re.compile(r"A(?<![A-Z0-9]A)(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA|3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])"),
    ),
    # A secret key is 40 characters of base64, a session token hundreds: too common a shape to catch
    # without its name beside it (`aws_secret_access_key = `, `"SecretAccessKey": `, `"SessionToken": `).
    "aws_secret_key": (
        re.compile(
            r"(?i:(?:aws_?)?secret_?(?:access_?)?key|(?:aws_?)?session_?token|aws_?security_?token)[\"']?(?:\s*[:=]\s*|[ \t]+)"
            r"[\"']?(?P<span>[A-Za-z0-9/+]{40}(?:[A-Za-z0-9/+]{60,})?={0,2})(?![A-Za-z0-9/+=])"
        ),
    ),
    # Storage account and Service Bus keys in connection strings and settings; SAS signatures are URL
    # credentials (`sig=`).
    "azure_key": (
        re.compile(
            r"(?i:account_?key|shared_?access_?key|azure_?storage_?key|storage_?account_?key|primary_?key|"
            r"secondary_?key)[\"']?\s*[=:]\s*[\"']?(?P<span>[A-Za-z0-9+/]{30,}={0,2})(?![A-Za-z0-9+/=])"
        ),
    ),
    # Classic (ghp_, gho_, ...) and fine-grained tokens (github_pat_, 82 characters, an underscore in no fixed place).
    "github_token": (
        re.compile(r"g(?<![A-Za-z0-9_]g)(?:h[pousr]_[A-Za-z0-9]{36}|ithub_pat_[A-Za-z0-9_]{49,})(?![A-Za-z0-9_])"),
    ),
    # Personal, deploy, feed, service-account, runner, CI-job, incoming-mail, trigger, agent and OAuth tokens.
    "gitlab_token": (
        re.compile(
            r"(?:g(?<![\w-]g)l(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|G(?<![\w-]G)R1348941)[A-Za-z0-9_-]{20,}(?![\w-])"
        ),
    ),
    "slack_token": (
        re.compile(
            r"(?:x(?<![\w-]x)(?:ox[abposre]|app)-[0-9A-Za-z-]{10,}"
            r"|https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/-]{20,})(?![\w-])"
        ),
    ),
    # Secret and restricted keys, live or test, and webhook signing secrets; publishable keys are public.
    "stripe_key": (
        re.compile(
            r"(?:[sr](?<![A-Za-z0-9_][sr])k_(?:live|test)_|w(?<![A-Za-z0-9_]w)hsec_)[0-9A-Za-z]{24,}(?![0-9A-Za-z])"
        ),
    ),
    "google_api_key": (re.compile(r"A(?<![\w-]A)Iza[0-9A-Za-z_-]{35}(?![\w-])"),),
    # Other vendors' tokens by their prefix (OpenAI, Anthropic, Hugging Face, npm, PyPI, SendGrid, Google
    # OAuth, ...): the table is in pii_tokens.
    "api_token": (API_TOKEN,),
    # Header and payload are base64url JSON objects, so both start "eyJ" ('{"'); checked below.
    "jwt": (re.compile(r"e(?<![\w-]e)yJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*(?![\w-])"),),
    # `Authorization: Bearer ...` in HTTP, curl, JSON or code, API-key headers, and `Bearer <token>` alone.
    "auth_header": (
        re.compile(
            r"(?i:(?:proxy-)?authorization)[\"']?\s*[:=,]\s*[\"']?(?P<scheme>(?i:bearer|basic|token|bot|apikey|"
            r"sso-key|jwt)[ \t]+)?(?P<span>" + _HEADER_VALUE + ")"
        ),
        re.compile(
            r"(?i:x-api-key|x-auth-token|x-access-token|private-token|x-goog-api-key|ocp-apim-subscription-key|"
            r"x-functions-key|api-key)[\"']?[ \t]*[:=,][ \t]*[\"']?(?P<span>" + _HEADER_VALUE + ")"
        ),
        re.compile(r"(?P<scheme>[Bb](?<![\w-][Bb])(?:earer|asic)[ \t]+)(?P<span>" + _HEADER_VALUE + ")"),
    ),
    # A password in a URL (any host: `postgres://app:pw@10.0.0.5/db`, `redis://:pw@localhost`) or a
    # token as its user name; secrets in query strings (`?access_token=`, Azure SAS `sig=`, presigned
    # `X-Amz-Signature=`).
    "url_credentials": (
        re.compile(r":(?<=[A-Za-z0-9]:)//[^\s:/?#@\"'<>]*:(?P<span>[^\s/?#@\"'<>]+)@(?=[\w\[])"),
        re.compile(r":(?<=[A-Za-z0-9]:)//(?P<span>[A-Za-z0-9_-]{20,})@(?=[\w\[])"),
        re.compile(
            r"[?&](?P<name>(?i:access_token|refresh_token|id_token|auth_token|token|api_?key|apikey|key|secret|"
            r"client_secret|password|passwd|pwd|sig|signature|x-amz-signature|x-amz-security-token|"
            r"x-goog-signature|code))=(?P<span>[^&#\s\"'<>\\]{8,})"
        ),
    ),
    # name = "value", name: 'value', "name": "value", NAME=value: the value is replaced, the name kept.
    # Also netrc (`machine h login u password p`), connection strings (`...;Pwd=p;`) and `--password p`.
    "secret_assignment": (
        re.compile(SECRET_NAME + r"[\"']?[ \t]*(?P<sep>:=|=>|=|:)[ \t]*" + _VALUE),
        re.compile(r"p(?<![\w-]p)assword[ \t]+(?P<bare>[^\s\"'`]+)"),
        re.compile(r"-(?<=--)(?P<name>(?i:password|passwd|pass|token|api-key|secret))(?:=|[ \t]+)" + _VALUE),
    ),
    # Found from the "@"; the part before it is matched backwards by LOCAL_PART.
    "email": (re.compile(r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"),),
    # US SSN and ITIN, UK National Insurance numbers; after their names, Canadian SIN, Aadhaar, passport (pii_ids).
    "national_id": NATIONAL_IDS,
    # A date after "born", "date of birth", "DOB" or "birthday" (pii_ids); dates elsewhere are left alone.
    "birth_date": (BIRTH_DATE,),
    # Country, check digits, then groups of four (optionally one space apart), either case; mod 97 below.
    "iban": (
        re.compile(
            r"[A-Za-z](?<![A-Za-z0-9][A-Za-z])[A-Za-z]\d\d(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,3})?(?![A-Za-z0-9])"
        ),
    ),
    # 13 to 19 digits, optionally in groups split by one space or dash, or by one other separator used
    # throughout (4111.1111.1111.1111, 4111/1111/...); checked with Luhn below.
    "credit_card": (
        re.compile(r"[2-6](?<![\w.+-][2-6])\d{3}(?:[ -]?\d){9,15}(?![\w-]|\.\d)"),
        re.compile(r"[2-6](?<![\w.+/-][2-6])\d{3}(?P<sep>[./_])\d{4,6}(?P=sep)\d{4,5}(?:(?P=sep)\d{1,4})?(?![\w./-])"),
    ),
    # Found from the first colon; up to four hex digits before it are taken in by extend_ipv6.
    "ipv6": (re.compile(r":(?:[0-9A-Fa-f]{0,4}:){1,6}[0-9A-Fa-f]{0,4}(?![\w:])"),),
    "ipv4": (re.compile(r"\d(?<![\w.]\d)\d{0,2}(?:\.\d{1,3}){3}(?!\w|\.\d)"),),
    # 10., 172., 192., 198. or 203. and three more numbers: RFC 1918 and documentation addresses (pii_checks).
    "private_ipv4": (re.compile(r"[12](?<![\w.][12])(?:0|72|92|98|03)(?:\.\d{1,3}){3}(?!\w|\.\d)"),),
    # International (+CC ..., or compact E.164 +447946095800) or with an area code in parentheses or
    # North American (555-123-4567, 555.123.4567); bare digit runs are left alone: in code they are
    # constants far more often than telephones.
    "phone": (
        re.compile(
            r"[+(\d](?<![\w+.-][+(\d])(?:(?<=\+)\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]\d{2,4}){1,4}"
            r"|(?<=\+)[1-9]\d{6,14}|(?<=\()\d{2,5}\)[ .-]?\d{3,4}[ .-]?\d{3,4}|(?<=\d)\d{2}([.-])\d{3}\1\d{4})"
            r"(?![\w.-]\d|\w)"
        ),
    ),
}
# Words every match of these expressions starts with (lowercased): see pii._matches.
ANCHORS = {
    PATTERNS["secret_assignment"][0]: SECRET_WORDS,
    PATTERNS["aws_secret_key"][0]: ("aws", "secret", "session"),
    PATTERNS["azure_key"][0]: ("account", "shared", "azure", "storage", "primary", "secondary"),
    PATTERNS["auth_header"][0]: ("proxy-", "authorization"),
    PATTERNS["auth_header"][1]: ("x-", "private-", "ocp-", "api-"),
    **ID_ANCHORS,
    BIRTH_DATE: BIRTH_ANCHORS,
}
LOCAL_PART = re.compile(r"(?<![\w.%+-])[A-Za-z0-9][\w.%+-]{0,63}\Z")
HEX = frozenset("0123456789abcdefABCDEF")
_AWS_PREFIXES = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "A3T")
_GITLAB_PREFIXES = ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-")


def _has(*parts: str) -> Callable[[str], bool]:
    return lambda text: any(p in text for p in parts)


def _has_lower(*parts: str) -> Callable[[str], bool]:
    def needs(text: str) -> bool:
        lowered = text.lower()
        return any(p in lowered for p in parts)

    return needs


# Cheap tests that rule a detector out without running its expressions.
NEEDS: dict[str, Callable[[str], bool]] = {
    "private_key": _has("PRIVATE KEY", "LS0tLS1CRUdJTi"),
    "pem_block": _has("-----BEGIN "),
    "aws_access_key": _has(*_AWS_PREFIXES),
    "aws_secret_key": _has_lower("secret", "session", "security"),
    "azure_key": _has_lower("key"),
    "github_token": _has("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": _has(*_GITLAB_PREFIXES, "GR1348941"),
    "slack_token": _has("xox", "xapp-", "hooks.slack.com"),
    "stripe_key": _has("k_live_", "k_test_", "whsec_"),
    "google_api_key": _has("AIza"),
    "api_token": _has(*API_TOKEN_MARKERS),
    "jwt": _has("eyJ"),
    "auth_header": _has_lower("authorization", "bearer", "basic", "-key", "-token"),
    "url_credentials": _has("://", "?", "&"),
    "secret_assignment": _has_lower(*SECRET_WORDS),
    "email": _has("@"),
    "birth_date": _has_lower("born", "birth", "dob", "d.o.b"),
    "private_ipv4": _has("10.", "172.", "192.", "198.51.", "203.0."),
}


def secret_value_ok(text: str, match: re.Match) -> bool:
    """A quoted value, or a bare one on a line of its own (`NAME=value`, `name: value`, as in .env, YAML
    or INI files; a trailing `# comment` allowed) or in a connection string (`;Pwd=value;`), that does
    not read as code: no call, no reserved word, and an identifier only after `=` with no spaces or
    after a colon (a spaced `name = word` is far more often Python than a secret). A weak name
    (`token`, `DB_PASS`, `auth`) needs a value that looks random."""
    value = match.groupdict().get("span") or match.group("bare")
    if templated(value) or value[0] in "<$%{/" or _claimed(value) or _named_here(text, match):
        return False  # placeholders, templates, paths, masks such as ******, tokens another kind names
    before, after = line_around(text, match)
    if "sep" not in match.re.groupindex:  # netrc `password p` or `--password p`
        return _netrc_or_flag_ok(text, match, value, before)
    if weak_name(name_of(text, match)) and not looks_random(value):
        return False
    if match.groupdict().get("span"):
        return True
    if after.startswith(";") or before.endswith(";"):
        return True
    if re.fullmatch(r"[ \t]*[A-Za-z0-9_]*", before) and match.group("sep") == "=" and looks_random(value):
        return True  # a shell environment prefix: `PGPASSWORD=... psql`
    if re.sub(r"^\s+#.*", "", after).strip() or not re.fullmatch(r"[ \t]*(?:export[ \t]+)?[A-Za-z0-9_.-]*", before):
        return False
    identifier = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", value) is not None
    spaced = text[match.start("sep") - 1] in " \t" or text[match.end("sep")] in " \t"
    return not identifier or match.group("sep") == ":" or not spaced


def _netrc_or_flag_ok(text: str, match: re.Match, value: str, before: str) -> bool:
    if "name" in match.re.groupindex:  # --password value: a command line
        return looks_random(value, 6)
    # netrc: this line and the lines above it up to its `machine` (or `default`) are keyword-value pairs.
    lines = text[: text.find("\n", match.end()) % (len(text) + 1)].split("\n")[-6:]
    for line in reversed(lines):
        if not netrc_line(line):
            return False
        if re.search(r"(?:^|\s)(?:machine|default)(?:\s|$)", line):
            return True
    return False


def _claimed(value: str) -> bool:
    """A value a token kind names by its shape is reported, and replaced, as that kind."""
    return any(p.fullmatch(value) for kind in TOKEN_KINDS for p in PATTERNS[kind])


def _named_here(text: str, match: re.Match) -> bool:
    """The same value beside a cloud provider's own name (`aws_session_token = `) is that provider's kind."""
    group = "span" if match.groupdict().get("span") else "bare"
    start = text.rfind("\n", 0, match.start()) + 1
    for pattern in PATTERNS["aws_secret_key"] + PATTERNS["azure_key"]:
        if any(m.span("span") == match.span(group) for m in pattern.finditer(text, start, match.end(group))):
            return True
    return False


def _header_ok(text: str, match: re.Match) -> bool:
    value, scheme = match.group("span"), (match.groupdict().get("scheme") or "").strip().lower()
    if templated(value) or _claimed(value):
        return False
    if scheme == "basic":
        return basic_auth_ok(value)
    if scheme and match.re is PATTERNS["auth_header"][2]:  # `Bearer x` with no header name: a token's shape
        return looks_random(value, 16)
    return looks_random(value, 8)


def _url_ok(match: re.Match) -> bool:
    value = match.group("span")
    if templated(value) or _claimed(value):
        return False
    name = (match.groupdict().get("name") or "").lower()
    if match.re is PATTERNS["url_credentials"][1] or name in ("key", "code", "token", "sig", "signature"):
        return looks_random(value, 16)
    return name == "" or looks_random(value, 8)


def valid(kind: str, value: str, text: str, match: re.Match) -> bool:
    if kind == "pem_block":
        return "PRIVATE KEY" not in match.group("label")  # those are private_key's, cut off or not
    if kind == "credit_card":
        digits = re.sub(r"\D", "", value)
        return 13 <= len(digits) <= 19 and luhn_ok(digits)
    if kind == "iban":
        return iban_ok(value)
    if kind == "national_id":
        return national_id_ok(value, match)
    if kind == "birth_date":
        return birth_date_ok(value)
    if kind == "jwt":
        return jwt_ok(value)
    if kind == "github_token" and value.startswith("github_pat_"):
        return all(re.search(chars, value[11:]) for chars in (r"\d", "[a-z]", "[A-Z]"))
    if kind == "secret_assignment":
        return secret_value_ok(text, match)
    if kind == "auth_header":
        return _header_ok(text, match)
    if kind == "url_credentials":
        return _url_ok(match)
    if kind == "ipv4":
        return ip_identifies_someone(value)
    if kind == "private_ipv4":
        start = max(0, match.start() - 40)  # the words just before it, on its line
        return private_ipv4_ok(value, text[text.rfind("\n", start, match.start()) + 1 or start : match.start()])
    if kind == "ipv6":
        # At least three groups: `a[1::2]` and `12:30` are not addresses.
        return sum(1 for group in value.split(":") if group) >= 3 and ip_identifies_someone(value)
    if kind == "phone":
        return 7 <= sum(ch.isdigit() for ch in value) <= 15
    return True
