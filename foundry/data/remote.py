"""Remote sources, kept fresh: http(s) files and S3 prefixes mirrored into `$FOUNDRY_HOME/sources/`.

Every acquire asks the origin again. http(s): a conditional GET (If-None-Match with the ETag,
If-Modified-Since with the Last-Modified it sent last time); a server that sends neither is read
again and the copy replaced when its length or sha256 differs. S3: the listing's ETags against the
ones recorded; objects gone from the bucket are deleted from the copy. Transient errors (connection
refused or reset, timeouts, 5xx, throttling) are retried `data.fetch_retries` times, waiting
`data.fetch_backoff_s` and twice as long each time after; then the source is unreachable and
`SourceError` says so. What the origin said (ETag, Last-Modified, when it was asked) is kept beside
the copy and lands in the source manifest. No download may pass `data.max_download_bytes`: an http
answer is refused by its Content-Length when that says more, and cut off the moment its bytes do;
an S3 object by the size its listing gives, and by its bytes.
"""

from __future__ import annotations

import datetime
import hashlib
import http.client
import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TypeVar

from foundry.config import DataConfig
from foundry.core.digests import sha256_file
from foundry.core.fs import remove_tree
from foundry.core.redact import redact_url
from foundry.data.credentials import CredentialError, authorised

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT_HTTP = {408, 425, 429, 500, 502, 503, 504}
GONE_HTTP = {404, 410}
TRANSIENT_S3_CODES = {"Throttling", "ThrottlingException", "SlowDown", "RequestTimeout", "RequestLimitExceeded"}


class SourceError(RuntimeError):
    """The source cannot be read; the message says which and why."""


class Transient(Exception):
    """A failure worth another attempt."""


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def retrying(what: str, cfg: DataConfig, attempt: Callable[[], T]) -> T:
    """`attempt()`, again after each `Transient` failure, with doubling waits; `SourceError` once out of tries."""
    delay = cfg.fetch_backoff_s
    for tries in range(1, cfg.fetch_retries + 2):
        try:
            return attempt()
        except Transient as exc:
            if tries > cfg.fetch_retries:
                raise SourceError(f"cannot download {what}: {exc} (unreachable after {tries} attempts)") from None
            log.warning("%s: %s; attempt %d of %d in %.1f s", what, exc, tries + 1, cfg.fetch_retries + 1, delay)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


@contextmanager
def locked(folder: Path):
    """One process at a time refreshes or reads a source's copy (two pipelines may acquire the same source).
    Reentrant in a thread: acquire holds it while it fetches, lists and hashes, and the fetch takes it again.
    Another thread, or process, waits."""
    from filelock import FileLock

    folder.mkdir(parents=True, exist_ok=True)
    # One instance per path: a second instance in the same thread would deadlock (filelock 4 raises instead).
    with FileLock(str(folder.parent / f"{folder.name}.lock"), is_singleton=True):
        yield


def _state_path(folder: Path) -> Path:
    """What the origin said, beside (not inside) the copy, so that a walk of the copy never lists it."""
    return folder.parent / f"{folder.name}.origin.json"


def _read_state(folder: Path) -> dict:
    try:
        return json.loads(_state_path(folder).read_text())
    except (OSError, ValueError):
        return {}


def _write_state(folder: Path, state: dict) -> None:
    path = _state_path(folder)
    scratch = path.with_name(f"{path.name}.part")
    scratch.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(scratch, path)


# --- http(s) ---------------------------------------------------------------------------------


def too_large(what: str, limit: int) -> SourceError:
    return SourceError(f"cannot download {what}: more than {limit} bytes (data.max_download_bytes)")


def _copy_capped(response, out, limit: int, what: str) -> None:
    """Copy the response into `out`, refusing it the moment it passes `limit` bytes."""
    while chunk := response.read(min(1 << 20, limit + 1 - out.tell())):
        out.write(chunk)
        if out.tell() > limit:
            raise too_large(what, limit)


def _get(request: urllib.request.Request, url: str, part: Path, limit: int) -> tuple[int, dict[str, str]]:
    """One conditional GET into `part`: (status, response headers); 304 writes nothing. `url` is the source
    as messages name it (redacted: the request's own may hold a signature)."""
    try:
        with urllib.request.urlopen(request, timeout=30) as response, open(part, "wb") as out:
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > limit:
                raise too_large(url, limit)
            _copy_capped(response, out, limit, url)
            if length is not None and out.tell() != int(length):
                raise Transient(f"connection closed after {out.tell()} of {length} bytes")
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        if exc.code == 304:
            return 304, dict(exc.headers)
        if exc.code in TRANSIENT_HTTP:
            raise Transient(f"HTTP {exc.code} {exc.reason}") from None
        raise
    except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as exc:
        raise Transient(str(getattr(exc, "reason", exc)) or type(exc).__name__) from None


def _request(url: str, conditional: dict[str, str]) -> urllib.request.Request:
    """The GET of a source URL, with its credentials (`foundry.data.credentials`) in headers that a redirect
    does not carry to another server."""
    try:
        address, auth = authorised(url)
    except CredentialError as exc:
        raise SourceError(f"cannot download {redact_url(url)}: {exc}") from None
    request = urllib.request.Request(address, headers=conditional)
    for key, value in auth.items():
        request.add_unredirected_header(key, value)
    return request


def copy_name(url: str) -> str:
    """The local copy's file name: the URL path's last segment. A path ending in `/` or `..` names a folder,
    not a file (`..` would name the mirror's parent), so its copy is `index.txt`."""
    name = PurePosixPath(urllib.parse.urlparse(url).path).name
    return "index.txt" if name in ("", "..") else name


def fetch_http(url: str, folder: Path, cfg: DataConfig) -> tuple[Path, bool, dict[str, str]]:
    """The file at `url`, mirrored in `folder`: (local copy, whether it changed, what the origin said)."""
    shown = redact_url(url)  # what is recorded and said: the request alone holds a credential
    name = copy_name(url)
    part = folder / f"{name}.part"
    longest = os.pathconf(folder, "PC_NAME_MAX")
    if len(os.fsencode(part.name)) > longest:
        raise SourceError(
            f"cannot download {shown}: its file name is longer than the {longest} bytes a name here takes"
        )
    try:
        return _mirror(url, shown, folder / name, part, cfg)
    except SourceError:
        raise
    except OSError as exc:  # the copy could not be written (a name too long, a full disk): no .part is left
        part.unlink(missing_ok=True)
        raise SourceError(f"cannot download {shown} to {folder / name}: {exc.strerror or exc}") from None


def _mirror(url: str, shown: str, target: Path, part: Path, cfg: DataConfig) -> tuple[Path, bool, dict[str, str]]:
    folder = target.parent
    with locked(folder):
        state = _read_state(folder) if target.exists() else {}
        headers = {}
        if state.get("etag"):
            headers["If-None-Match"] = state["etag"]
        if state.get("last_modified"):
            headers["If-Modified-Since"] = state["last_modified"]
        request = _request(url, headers)
        try:
            status, answer = retrying(shown, cfg, lambda: _get(request, shown, part, cfg.max_download_bytes))
        except urllib.error.HTTPError as exc:
            part.unlink(missing_ok=True)
            if exc.code in GONE_HTTP:  # removed at the source: so is our copy
                forget(folder)
            hint = " (its credentials: user:password@ in the URL, or a netrc file)" if exc.code == 401 else ""
            raise SourceError(f"cannot download {shown}: HTTP {exc.code} {exc.reason}{hint}") from None
        except SourceError:
            part.unlink(missing_ok=True)
            raise
        changed = False
        if status != 304:
            digest = sha256_file(part)
            changed = digest != state.get("sha256")
            if changed:
                os.replace(part, target)
            part.unlink(missing_ok=True)
            state = {
                "sha256": digest,
                "size": target.stat().st_size,
                "etag": answer.get("ETag", ""),
                "last_modified": answer.get("Last-Modified", ""),
            }
        state.update(origin=shown, checked_at=now())
        _write_state(folder, state)
    if changed:
        log.info("%s changed at the source: fetched again", shown)
    return target, changed, state


def forget(folder: Path) -> None:
    """Delete a mirrored source's copy, whatever it held."""
    remove_tree(folder, within=folder.parent, ignore_errors=True)
    _state_path(folder).unlink(missing_ok=True)


# --- S3 --------------------------------------------------------------------------------------


def _s3_call(call: Callable[[], T]) -> T:
    """A boto3 call, its transient failures marked for `retrying`."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    try:
        return call()
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if error.get("Code") in TRANSIENT_S3_CODES or status >= 500:
            raise Transient(f"{error.get('Code', status)}: {error.get('Message', '')}") from None
        raise
    except (ConnectionError, HTTPClientError) as exc:  # refused, reset, timed out
        raise Transient(str(exc)) from None


def _listing(s3, bucket: str, prefix: str) -> list[dict]:
    return [
        obj
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for obj in page.get("Contents", [])
    ]


def sync_s3(url: str, folder: Path, cfg: DataConfig, wanted: Callable[[str], bool]) -> dict[str, dict[str, str]]:
    """Mirror the wanted objects under `url` into `folder`: new or changed ETags fetched, deleted objects
    deleted. Returns {local path: what the origin said}."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    from foundry.runtime.env import s3_endpoint_url

    parsed = urllib.parse.urlparse(url)
    bucket, prefix = parsed.netloc, parsed.path.lstrip("/")
    # Our own retries (`data.fetch_retries`), not botocore's on top of them.
    s3 = boto3.client("s3", endpoint_url=s3_endpoint_url(), config=Config(retries={"total_max_attempts": 1}))
    seen: dict[str, dict[str, str]] = {}
    with locked(folder):
        state = _read_state(folder)
        try:
            objects = retrying(url, cfg, lambda: _s3_call(lambda: _listing(s3, bucket, prefix)))
            checked = now()
            for obj in objects:
                target = folder / obj["Key"]
                if not inside(target, folder) or not wanted(obj["Key"].rsplit("/", 1)[-1]):
                    continue
                if obj["Size"] > cfg.max_download_bytes:
                    raise too_large(f"s3://{bucket}/{obj['Key']}", cfg.max_download_bytes)
                etag, before = obj["ETag"], state.get(obj["Key"], {})
                if not target.is_file() or before.get("etag") != etag or target.stat().st_size != obj["Size"]:
                    _download(s3, bucket, obj["Key"], target, f"s3://{bucket}/{obj['Key']}", cfg)
                seen[obj["Key"]] = {
                    "origin": f"s3://{bucket}/{obj['Key']}",
                    "etag": etag,
                    "last_modified": obj["LastModified"].isoformat(),
                    "checked_at": checked,
                }
        except (BotoCoreError, ClientError) as exc:
            raise SourceError(f"cannot read {url}: {exc}") from None
        _delete_unlisted(folder, set(seen))
        _write_state(folder, seen)
    return {str(folder / key): info for key, info in seen.items()}


def _download(s3, bucket: str, key: str, target: Path, what: str, cfg: DataConfig) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.part")
    retrying(what, cfg, lambda: _s3_call(lambda: s3.download_file(bucket, key, str(part))))
    if part.stat().st_size > cfg.max_download_bytes:  # replaced by a larger object since the listing
        part.unlink()
        raise too_large(what, cfg.max_download_bytes)
    os.replace(part, target)


def _delete_unlisted(folder: Path, keys: set[str]) -> None:
    """Objects removed from the bucket (or no longer wanted) leave the copy too."""
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.relative_to(folder).as_posix() not in keys:
            log.info("%s: gone from the source, deleted from the copy", path.relative_to(folder))
            path.unlink()


def inside(path: Path, root: Path) -> bool:
    """Whether `path` stays under `root` once links and `..` are resolved (archive and bucket keys can try not to)."""
    return path.resolve().is_relative_to(root.resolve())


def digest_of(url: str) -> str:
    """The cache folder name of a remote source (of its redacted form: a name is no place for a secret)."""
    return hashlib.sha256(redact_url(url).encode()).hexdigest()[:16]
