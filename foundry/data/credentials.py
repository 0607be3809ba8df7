"""Credentials of http(s) sources, sent and never written.

A source's user and password come from its URL (given on the command line or in a config file; the config
keeps it redacted and the whole URL in the environment: `foundry.core.redact`), else from a netrc file: `$NETRC`,
`$FOUNDRY_HOME/netrc` or `~/.netrc`, the first that exists (`machine HOST login USER password PASS`).
They go in an `Authorization: Basic` header that is not repeated to where the server redirects; the URL
requested carries no userinfo (urllib would read `user:pass@host` as the host).
"""

from __future__ import annotations

import base64
import netrc
import os
import urllib.parse
from pathlib import Path

from foundry.core.redact import MASK, Redacted, is_redacted, reveal
from foundry.runtime.env import foundry_home


class CredentialError(RuntimeError):
    """A source's credential is redacted or unreadable, and nothing else supplies it."""


def netrc_file() -> Path | None:
    """The credentials file read for http sources, or None when there is none."""
    candidates = [os.environ.get("NETRC", ""), foundry_home() / "netrc", Path("~/.netrc").expanduser()]
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def from_netrc(host: str) -> tuple[str, str] | None:
    """(login, password) for `host` in the netrc file, when it names the host (or has a `default`)."""
    path = netrc_file()
    if path is None:
        return None
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError) as exc:
        # The parser quotes the offending line, which may hold a password: only the file and line number.
        line = getattr(exc, "lineno", "?")
        raise CredentialError(f"cannot read the credentials file {path} (line {line})") from None
    return (entry[0], entry[2] or "") if entry else None


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}


def authorised(url: str, what: str = "data.source") -> tuple[str, dict[str, str]]:
    """(the URL to request, the headers that authorise it) for an http(s) URL as the config keeps it (`what`
    names the setting in messages)."""
    try:
        whole = reveal(url, what)
    except Redacted as exc:
        whole, missing = url, exc
    else:
        missing = None
    parts = urllib.parse.urlsplit(whole)
    request = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))
    if missing is not None and is_redacted(request):
        raise CredentialError(str(missing))  # a masked signature: nothing but the whole URL holds it
    user = urllib.parse.unquote(parts.username) if parts.username is not None else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    if user not in (None, MASK) and password not in (None, MASK):
        return request, _basic(user, password)
    stored = from_netrc(parts.hostname or "")
    if stored is not None and user in (None, MASK, stored[0]):
        return request, _basic(*stored)
    if missing is not None:
        raise CredentialError(f"{missing}; or put `machine {parts.hostname} login USER password ...` in a netrc file")
    if user is not None:  # `https://TOKEN@host`: a token given as the user name
        return request, _basic(user, "")
    return request, {}
