"""A DVC remote in S3 (`s3://bucket/prefix`, or any S3-compatible store through `AWS_ENDPOINT_URL_S3` /
`AWS_ENDPOINT_URL`, as `foundry.data.versioning` gives DVC), as `foundry purge` reads and changes it: the same
questions as a local store (`purge_stores.Store`), asked with boto3.

DVC 3 lays a remote out as a cache: `<prefix>/files/md5/xx/rest`, a version being its `.dir` listing. The keys
under `files/md5/` are listed once (`keys`; `refresh` lists them again, after a push); a listing is read and
checked against its version (DVC's md5 of it) before it vouches for anything, as hydration does; a version read
from here (`files`) is downloaded object by object into a scratch folder outside the home, each object checked
against its md5. Any error of the service is a `RemoteError` (an `OSError`): the dry run reports the remote as
not checked, `--apply` stops there and is run again once the remote answers (its marks make it resume).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import weakref
from pathlib import Path
from urllib.parse import urlparse

from foundry.gc.scan import MD5
from foundry.purge.data import VersionFiles

PLACE = "remote"


class RemoteError(OSError):
    """The S3 remote did not answer, or refused: nothing is taken as clean, nothing more is removed."""


def _client():
    import boto3
    from botocore.config import Config

    from foundry.runtime.env import s3_endpoint_url

    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=60)
    return boto3.client("s3", endpoint_url=s3_endpoint_url(), config=config)


class S3Store:
    """A DVC remote in S3; `root` and `url` are its URL."""

    place = PLACE

    def __init__(self, url: str, client=None):
        parts = urlparse(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError(f"{url!r} is not an s3://bucket/prefix URL")
        self.url = self.root = url
        self.bucket, self.prefix = parts.netloc, parts.path.strip("/")
        self._s3 = client
        self._keys: dict[str, str] | None = None  # key -> ETag (an md5 unless uploaded in parts)
        self._scratch: Path | None = None

    def _call(self, doing: str, call):
        from botocore.exceptions import BotoCoreError, ClientError

        if self._s3 is None:
            self._s3 = _client()
        try:
            return call(self._s3)
        except (BotoCoreError, ClientError) as exc:
            raise RemoteError(f"the DVC remote {self.url} cannot {doing} ({type(exc).__name__}: {exc})") from None

    @property
    def top(self) -> str:
        """Where DVC 3 keeps a remote's objects: `<prefix>/files/md5/`."""
        return f"{self.prefix}/files/md5/" if self.prefix else "files/md5/"

    def key(self, md5: str, suffix: str = "") -> str:
        return f"{self.top}{md5[:2]}/{md5[2:]}{suffix}"

    def keys(self) -> dict[str, str]:
        """Every key under the remote's `files/md5/`, with its ETag: listed once (`refresh`)."""
        if self._keys is None:
            listed = self._call("be listed", self._list)
            self._keys = {o["Key"]: o.get("ETag", "").strip('"') for o in listed}
        return self._keys

    def _list(self, s3) -> list[dict]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.top)
        return [obj for page in pages for obj in page.get("Contents", [])]

    def refresh(self) -> None:
        self._keys = None

    def _md5_of(self, key: str) -> str | None:
        rest = key.removeprefix(self.top).replace("/", "") if key.startswith(self.top) else ""
        return rest if MD5.fullmatch(rest) else None

    def versions(self) -> set[str]:
        return {md5 for key in self.keys() if key.endswith(".dir") and (md5 := self._md5_of(key[:-4]))}

    def has(self, md5: str) -> bool:
        return self.key(md5) in self.keys()

    def listed(self, version: str) -> bool:
        return self.key(version, ".dir") in self.keys()

    def _get(self, key: str) -> bytes:
        return self._call(f"read {key}", lambda s3: s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def listing(self, version: str) -> dict[str, str] | None:
        """{file: md5} of a version whose listing is here and hashes to the version; None otherwise."""
        if not self.listed(version):
            return None
        raw = self._get(self.key(version, ".dir"))
        if hashlib.md5(raw).hexdigest() != version:
            return None
        try:
            return {e["relpath"]: e["md5"] for e in json.loads(raw)}
        except (ValueError, KeyError, TypeError):
            return None

    def whole(self, version: str) -> bool:
        """The listing verifies and every object it lists is here, each whose ETag is an md5 (not uploaded in
        parts) with the md5 it is stored under. Lists the keys again first: this is asked after a push."""
        self.refresh()
        listing = self.listing(version)
        etags = self.keys()
        return listing is not None and all(
            self.key(m) in etags and (etags[self.key(m)] == m or "-" in etags[self.key(m)]) for m in listing.values()
        )

    def files(self, version: str) -> VersionFiles | None:
        """The version, read from here: each file downloaded when first asked for, checked against its md5."""
        listing = self.listing(version)
        if listing is None or not all(self.has(m) for m in listing.values()):
            return None
        return VersionFiles(listing, lambda name: self._download(listing[name]))

    def _download(self, md5: str) -> Path:
        if self._scratch is None:
            from foundry.core.fs import remove_tree

            self._scratch = Path(tempfile.mkdtemp(prefix="foundry-purge-s3-"))
            weakref.finalize(self, remove_tree, self._scratch, within=self._scratch.parent, ignore_errors=True)
        target = self._scratch / md5
        if not target.is_file():
            raw = self._get(self.key(md5))
            if hashlib.md5(raw).hexdigest() != md5:
                raise RemoteError(f"the object {self.key(md5)} of the DVC remote {self.url} does not hash to {md5}")
            target.write_bytes(raw)
        return target

    def _delete(self, key: str) -> int:
        """1 when the key was listed, 0 when not; deleted either way (S3 deletes a missing key without error)."""
        there = key in self.keys()
        self._call(f"delete {key}", lambda s3: s3.delete_object(Bucket=self.bucket, Key=key))
        self.keys().pop(key, None)
        return int(there)

    def remove(self, md5: str) -> int:
        return self._delete(self.key(md5))

    def remove_listing(self, version: str) -> int:
        return self._delete(self.key(version, ".dir"))
