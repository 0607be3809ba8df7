"""Credentials never stored: URLs and connection strings as Foundry logs, saves and shows them.

`redact_url` masks a URL's password (`user:***@host`; the whole userinfo of an http(s) URL without one,
where a token often sits) and the values of the query parameters that sign or authorise it (presigned S3,
Azure SAS, `token=`), keeping the rest so the URL stays recognisable. `redact_text` does it to every URL in
a message. A URL without credentials comes back unchanged, character for character, so digests of it stay
what they were.

The config itself never holds a credential: a source or storage URL given with one is kept as its
redacted form, and the whole URL goes into this process's environment (`keep`), which the processes it
starts inherit and where the code that opens the URL finds it again (`reveal`). What travels with a model
(its config, params, manifests, tags) is the redacted form; a process that was not given the URL gets the
credential from its own environment or credentials file, or an error saying so (`Redacted`).
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse

MASK = "***"
# Query parameters whose value is a credential (lowercase): AWS SigV4 and STS, Google signed URLs, Azure SAS
# (`sig`), and the usual token and key names.
SECRET_PARAMETERS = frozenset(
    {
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",
        "x-goog-credential",
        "sig",
        "signature",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "api_key",
        "apikey",
        "key",
        "password",
        "passwd",
        "secret",
        "client_secret",
    }
)
# A URL in prose: its last character is no punctuation that ends the sentence around it.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]*[^\s'\"<>`.,;:)\]]")
_ENV_PREFIX = "FOUNDRY_CREDENTIAL_"


class Redacted(RuntimeError):
    """A URL whose credential was redacted and is not in this process's environment."""


def _netloc(parts: urllib.parse.SplitResult) -> str:
    if "@" not in parts.netloc:
        return parts.netloc
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, has_password, _ = userinfo.partition(":")
    if has_password:
        return f"{user}:{MASK}@{host}"
    # `https://TOKEN@host` is how tokens are often given; `postgresql://user@host` names a user only.
    return f"{MASK}@{host}" if parts.scheme in ("http", "https") and userinfo != MASK else parts.netloc


def _query(query: str) -> str:
    pieces = []
    for piece in query.split("&"):
        name, has_value, _ = piece.partition("=")
        secret = urllib.parse.unquote_plus(name).lower() in SECRET_PARAMETERS
        pieces.append(f"{name}={MASK}" if secret and has_value else piece)
    return "&".join(pieces)


def redact_url(text: str) -> str:
    """`text` with its password and signing query values masked; unchanged when it has none (or is no URL)."""
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:  # an unbalanced `[` in the host: no URL we could open either
        return text
    if not parts.scheme or "://" not in text:
        return text
    netloc, query = _netloc(parts), _query(parts.query) if parts.query else parts.query
    if (netloc, query) == (parts.netloc, parts.query):
        return text  # rebuilt only when something was masked: every other URL keeps its exact spelling
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def without_credentials(url: str) -> str:
    """`url` redacted and with no userinfo at all: a link people follow (a browser would send `***`)."""
    shown = redact_url(url)
    try:
        parts = urllib.parse.urlsplit(shown)
    except ValueError:
        return shown
    if "@" not in parts.netloc:
        return shown
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))


def redact_text(text: str) -> str:
    """Every URL in a message (an exception, a log line) redacted."""
    return _URL.sub(lambda match: redact_url(match.group(0)), text)


def is_redacted(url: str) -> bool:
    """Whether `url` is a redacted form: a masked password or userinfo, or a masked signing parameter."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return False
    userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
    masked = [piece for piece in parts.query.split("&") if piece.endswith(f"={MASK}")]
    return userinfo in (MASK, f"{parts.username}:{MASK}") or any(
        urllib.parse.unquote_plus(piece.partition("=")[0]).lower() in SECRET_PARAMETERS for piece in masked
    )


def _variable(shown: str) -> str:
    return _ENV_PREFIX + hashlib.sha256(shown.encode()).hexdigest()[:16].upper()


def keep(url: str) -> str:
    """The form a config keeps: `url` redacted. The whole URL stays in this process's environment (and so in
    the processes it starts), under a name derived from the redacted form, for `reveal`."""
    shown = redact_url(url)
    if shown != url:
        os.environ[_variable(shown)] = url
    return shown


def reveal(url: str, what: str) -> str:
    """The URL `keep` was given for the redacted `url`; `url` itself when it holds no masked credential.
    `Redacted` when it does and this process was not given it: `what` names the setting."""
    if not is_redacted(url):
        return url
    try:
        return os.environ[_variable(url)]
    except KeyError:
        raise Redacted(
            f"{what} {url!r}: its credential was redacted and this process was not given it; give the full URL "
            "again (`--set`), or keep the secret out of the URL (a credentials file, the service's own variables)"
        ) from None
