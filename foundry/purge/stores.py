"""Where the data versions lie: the DVC caches and remotes Foundry writes (one layout: `files/md5/xx/rest`, a
version being its `.dir` listing), the hydrated copies, and the version checked out in the workspace.

A store is read with gc's readers (`gc_scan.cache_files`) and hydration's (`hydrate.dvc_listing`, which checks
a listing against its version before trusting it). An `s3://` remote is read and changed with boto3
(`purge_s3.S3Store`, the same questions), after the local stores; one that cannot be listed, and a remote of any
other scheme, is reported as not checked, with the objects `--apply` would have to check there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from foundry.core import fs
from foundry.data.hydrate import HydrationError, dvc_listing, listing_path
from foundry.gc.refs import workspace_version
from foundry.gc.scan import MD5, cache_files
from foundry.purge.data import VersionFiles
from foundry.purge.plan import Copy, Location, Unchecked
from foundry.purge.s3 import RemoteError, S3Store


@dataclass(frozen=True)
class Store:
    """A DVC cache or local remote."""

    place: str  # "workspace cache", "hydration cache" or "remote"
    root: Path

    @property
    def url(self) -> str:
        return str(self.root)

    def object(self, md5: str) -> Path:
        return self.root / "files" / "md5" / md5[:2] / md5[2:]

    def has(self, md5: str) -> bool:
        return self.object(md5).is_file()

    def listed(self, version: str) -> bool:
        """Its listing is here, readable or not."""
        return listing_path(self.root, version).exists()

    def whole(self, version: str) -> bool:
        return self.files(version) is not None

    def remove(self, md5: str) -> int:
        return _remove(self.object(md5), self.root)

    def remove_listing(self, version: str) -> int:
        return _remove(listing_path(self.root, version), self.root)

    def versions(self) -> set[str]:
        return set(cache_files(self.root)[0]) if self.root.is_dir() and not self.root.is_symlink() else set()

    def listing(self, version: str) -> dict[str, str] | None:
        try:
            return dvc_listing(self.root, version)
        except HydrationError:
            return None

    def files(self, version: str) -> VersionFiles | None:
        """The version, readable from here: its listing verifies and every object it lists is present."""
        listing = self.listing(version)
        if listing is None or not all(self.object(m).is_file() for m in listing.values()):
            return None
        return VersionFiles(listing, lambda name: self.object(listing[name]))


def local_path(url: str) -> Path | None:
    """The folder a remote URL names on this machine (a plain path or `file://`); None for `s3://` and the like."""
    parts = urlparse(url)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    return Path(url) if not parts.scheme or len(parts.scheme) == 1 else None  # `C:` is a drive, not a scheme


@dataclass(frozen=True)
class Places:
    home: Path
    stores: tuple[Store | S3Store, ...]  # the local ones first: a version is read from S3 when no other has it
    elsewhere: tuple[str, ...]  # remotes of a scheme the purge cannot read (gs://, azure://…)
    missing: tuple[str, ...] = ()  # local remotes named (config, registry, runs) that are no folder here
    unreadable: tuple[tuple[str, str], ...] = ()  # (url, why): s3:// remotes that could not be listed

    @classmethod
    def of(cls, home: Path, remotes: set[str]) -> Places:
        """The stores of the home and `remotes`; a local remote that is no folder here is `missing` (a disk not
        mounted, another machine's path: it may hold copies), except the default `$FOUNDRY_HOME/dvc-remote`,
        which is only there once something was pushed to it."""
        stores = [Store("workspace cache", home / "workspace" / ".dvc" / "cache")]
        stores.append(Store("hydration cache", home / "hydrated" / ".cache"))
        elsewhere, missing, s3, unreadable = [], [], [], []
        for url in sorted(remotes):
            path = local_path(url)
            if url.startswith("s3://"):
                try:
                    (store := S3Store(url)).keys()
                    s3.append(store)
                except (RemoteError, ValueError) as exc:
                    unreadable.append((url, str(exc)))
            elif path is None:
                elsewhere.append(url)
            elif path.is_dir():
                stores.append(Store("remote", path))
            elif path.absolute() != (home / "dvc-remote").absolute():
                missing.append(url)
        return cls(home, tuple(stores + s3), tuple(elsewhere), tuple(missing), tuple(unreadable))

    def hydrated(self) -> dict[str, Path]:
        root = self.home / "hydrated"
        if root.is_symlink() or not root.is_dir():
            return {}
        return {p.name: p for p in root.iterdir() if MD5.fullmatch(p.name) and p.is_dir() and not p.is_symlink()}

    def checked_out(self) -> dict[str, Path]:
        """The workspace's `prepared/` and the version `dvc.lock` says it is."""
        version, folder = workspace_version(self.home), self.home / "workspace" / "prepared"
        return {version: folder} if version and folder.is_dir() and not folder.is_symlink() else {}

    def versions(self) -> set[str]:
        return set().union(*(s.versions() for s in self.stores), self.hydrated(), self.checked_out())

    def files(self, version: str) -> VersionFiles | None:
        """The version's files from the first place that holds it whole; a folder without a listing anywhere
        is listed by hashing its files (DVC's md5 of a file is the md5 of its bytes)."""
        for store in self.stores:
            if (found := store.files(version)) is not None:
                return found
        for folder in (self.hydrated().get(version), self.checked_out().get(version)):
            if folder is not None:
                listing = {p.relative_to(folder).as_posix(): _md5(p) for p in sorted(folder.rglob("*")) if _plain(p)}
                return VersionFiles(listing, lambda name, folder=folder: folder / name)
        return None

    def copies(self, version: str, files: tuple[Location, ...]) -> list[Copy]:
        """Each place the version's files that hold matched documents lie. An object counts wherever it is, with
        or without this version's listing beside it: it is the same bytes (another version may list it too)."""
        found = []
        for store in self.stores:
            present = [f.md5 for f in files if store.has(f.md5)]
            if present:
                found.append(Copy(place=store.place, where=str(store.root), files=tuple(sorted(set(present)))))
        for place, folders in (("hydrated copy", self.hydrated()), ("workspace", self.checked_out())):
            if (folder := folders.get(version)) is not None:
                present = [f.file for f in files if _plain(folder / f.file)]
                if present:
                    found.append(Copy(place=place, where=str(folder), files=tuple(present)))
        return found

    def unchecked(self, affected: dict[str, tuple[Location, ...]], unread: dict[str, str]) -> list[Unchecked]:
        """Remotes not read (with the objects of affected versions to check there) and versions with no copy here."""
        found = []
        keys = sorted({f"files/md5/{f.md5[:2]}/{f.md5[2:]}" for files in affected.values() for f in files})
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        for url in self.elsewhere:
            why = "neither a local path nor s3://: the purge does not read it"
            found.append(Unchecked(what=f"remote {url}", why=f"{why}; check there {shown or 'no object yet'}"))
        for url, error in self.unreadable:
            why = f"{error}; check there {shown or 'no object yet'}, or run the purge again once it answers"
            found.append(Unchecked(what=f"remote {url}", why=why))
        for url in self.missing:
            why = "a local DVC remote that is not a folder on this machine (not mounted?): it may hold copies"
            found.append(Unchecked(what=f"remote {url}", why=why))
        for version, why in sorted(unread.items()):
            found.append(Unchecked(what=f"data version {version}", why=why))
        return found


def _remove(path: Path, within: Path) -> int:
    """1 when a file was there and is now removed, 0 when it was already gone."""
    if not (path.exists() or path.is_symlink()):
        return 0
    fs.remove_file(path, within=within)
    return 1


def _plain(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
