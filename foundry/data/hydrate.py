"""Stage A, hydrate: pull exactly one data version from the DVC remote onto this node, and check it.

`$FOUNDRY_HOME/hydrated/<version>/` holds it, as a training node would: every file is checked
against the dataset's manifest (xxh3-128; a file copied from a folder remote by the digest taken as it
was written), the manifest against DVC's listing of the version (md5 per file), and the listing against
the version itself (DVC's md5 of the listing); the folder appears whole or not at all.

From a remote that is a folder on this machine (a path or file:// URL, DVC 3's `files/md5/` layout), the
listing and the objects it names are copied into the node's DVC cache and hard-linked into place as DVC's pull
would, without DVC: its repo set-up and state database cost ~0.45 s a hydration, ten times the copy of a
small image version (bench/README.md, the vision section). Any other remote, or a folder without the
version's listing, goes through DVC.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import re
import shutil
import urllib.parse
import uuid
from contextlib import chdir
from pathlib import Path, PurePosixPath

import yaml

from foundry.core.contracts import DataVersion, check_data_version
from foundry.core.digests import FAST, fast_digest, hasher_of
from foundry.core.fs import remove_tree
from foundry.data.manifest import FILE as MANIFEST_FILE
from foundry.data.manifest import DatasetManifest
from foundry.data.purged import mark_of
from foundry.data.remote_reach import RemoteUnreachable, wait_for_remote
from foundry.data.versioning import REMOTE_NAME, init_dvc

log = logging.getLogger(__name__)


class HydrationError(RuntimeError):
    """A data version could not be fetched or did not verify."""


def verify_dataset(
    data_dir: Path, listing: dict[str, str] | None = None, hashed: dict[str, str] | None = None
) -> list[str]:
    """Files that differ from what the dataset says it holds (missing files included).

    The manifest lists every other file's xxh3-128 (datasets from before it did: the shards' sha256);
    `listing`, DVC's {file: md5} for the version, vouches for the manifest itself, and a file the
    listing names that the manifest does not is reported too. `hashed` holds the xxh3-128 of files whose
    bytes were hashed as they were written (a hydration's copy), which are not read again. The rest are hashed
    in parallel threads (both hashes release the GIL on large buffers), those of a dataset under THREADED_BYTES
    in this one."""
    from concurrent.futures import ThreadPoolExecutor

    try:
        raw = (data_dir / MANIFEST_FILE).read_bytes()
        manifest = DatasetManifest.model_validate_json(raw)
    except (OSError, ValueError):
        return [MANIFEST_FILE]
    if listing is not None and listing.get(MANIFEST_FILE) != hashlib.md5(raw).hexdigest():
        return [MANIFEST_FILE]
    expected, digest = manifest.checksums()
    unlisted = sorted(set(listing or {}) - set(expected) - {MANIFEST_FILE})
    known = (hashed or {}) if digest is fast_digest else {}  # a dataset from before xxh3 is checked by sha256

    def bad(name: str) -> bool:
        path = data_dir / name
        return not path.is_file() or digest(path) != expected[name]

    wrong = unlisted + [
        name for name in set(expected) & set(known) if known[name] != expected[name] or not (data_dir / name).is_file()
    ]
    names = sorted(set(expected) - set(known))
    if _bytes(data_dir, names) < THREADED_BYTES:  # hashed in a few ms: starting threads would cost more
        return sorted(wrong + [name for name in names if bad(name)])
    with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1))) as pool:
        return sorted(wrong + [name for name, is_bad in zip(names, pool.map(bad, names)) if is_bad])


THREADED_BYTES = 64 << 20  # a dataset smaller than this is checked in the calling thread


def _bytes(data_dir: Path, names: list[str]) -> int:
    total = 0
    for name in names:
        try:
            total += (data_dir / name).stat().st_size
        except OSError:
            pass  # missing: `bad` reports it
    return total


def listing_path(cache: Path, data_version: str) -> Path:
    return cache / "files" / "md5" / data_version[:2] / f"{data_version[2:]}.dir"


def dvc_listing(cache: Path, data_version: str) -> dict[str, str]:
    """{file: md5} of a version, from the `.dir` object a pull left in the node's DVC cache.

    The version is DVC's md5 of exactly this object, so it is checked against the version before it
    vouches for anything; a listing that is missing or does not match is a `HydrationError`."""
    entry = listing_path(cache, data_version)
    try:
        raw = entry.read_bytes()
    except OSError as exc:
        raise HydrationError(f"DVC's listing of data version {data_version} is not in the cache ({exc})") from None
    if hashlib.md5(raw).hexdigest() != data_version:
        raise HydrationError(
            f"DVC's listing of data version {data_version} ({entry}) does not hash to the version: "
            "it is corrupt in the remote or in this node's cache"
        )
    try:
        return {e["relpath"]: e["md5"] for e in json.loads(raw)}
    except (ValueError, KeyError, TypeError):
        raise HydrationError(f"DVC's listing of data version {data_version} ({entry}) is not a listing") from None


def _forget(cache: Path, data_version: str) -> None:
    """Drop a version's listing and objects from the node's cache, so that the next try fetches them again."""
    entry = listing_path(cache, data_version)
    try:
        objects = [cache / "files" / "md5" / md5[:2] / md5[2:] for md5 in dvc_listing(cache, data_version).values()]
    except HydrationError:
        objects = []
    for path in [entry, *objects]:
        path.unlink(missing_ok=True)


def _verified_copy(target: Path, cache: Path, data_version: str) -> bool:
    """An earlier hydration of the version, checked file by file again; False if anything disagrees."""
    try:
        return not verify_dataset(target, dvc_listing(cache, data_version))
    except HydrationError:
        return False


def hydrate_version(version: DataVersion, home: Path) -> Path:
    """`$FOUNDRY_HOME/hydrated/<version>/`, pulled from the remote and verified; cached by version.

    A copy that fails the check is never returned: an earlier one is fetched again; a fresh pull that
    fails (a corrupt object in the remote, say) raises `HydrationError` naming the files, and leaves
    neither the copy nor its objects in the node's cache, so a retry fetches them anew. A version a purge
    removed (`foundry.data.purged`) is refused before anything is pulled or any copy returned."""
    if (purge := mark_of(home, version.data_version)) is not None:
        raise HydrationError(purge.refusal())
    hydrated = home / "hydrated"
    # `DataVersion` holds only 32 hex digits (a registry tag that is a path never gets this far); confined
    # all the same, so that no clean-up below can reach outside `hydrated/`.
    target = hydrated / check_data_version(version.data_version)
    cache = hydrated / ".cache"
    if target.is_dir():
        if _verified_copy(target, cache, version.data_version):
            return target
        log.warning("hydrated copy of %s is corrupt or unverifiable; fetching it again", version.data_version)
        remove_tree(target, within=hydrated)
        remove_tree(cache, within=hydrated, ignore_errors=True)  # hard-linked: the cached copy is corrupt too
    try:
        wait_for_remote(version.remote)
    except RemoteUnreachable as exc:
        raise HydrationError(
            f"node {os.uname().nodename} cannot hydrate data version {version.data_version}: {exc}"
        ) from None
    scratch = hydrated / f".pull-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True)
    try:
        try:  # a folder remote's files straight into the scratch folder, which becomes the copy: none to remove
            hashed = _copy_from_folder(version, scratch, cache)
        except HydrationError:
            _forget(cache, version.data_version)
            raise
        if hashed is None:
            _pull(version, scratch, cache=cache)
        prepared = scratch if hashed is not None else scratch / "prepared"
        try:
            bad = verify_dataset(prepared, dvc_listing(cache, version.data_version), hashed)
        except HydrationError:
            _forget(cache, version.data_version)
            raise
        if bad:
            _forget(cache, version.data_version)
            raise HydrationError(
                f"data version {version.data_version} from {version.remote} failed checksum verification: {bad}; "
                "nothing was hydrated"
            )
        try:
            os.rename(prepared, target)  # atomic: readers see all of it or none
        except OSError:
            if not target.is_dir():  # another process won the race with the same content
                raise
    finally:
        if scratch.exists():
            remove_tree(scratch, within=hydrated, ignore_errors=True)
    return target


MD5 = re.compile(r"^[0-9a-f]{32}$")


def _remote_folder(remote: str) -> Path | None:
    """The folder a DVC remote URL names on this machine (a plain path or file://), else None."""
    parsed = urllib.parse.urlparse(remote)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(urllib.parse.unquote(parsed.path))
    return Path(remote) if not parsed.scheme and remote else None


def _object(root: Path, md5: str) -> Path:
    return root / "files" / "md5" / md5[:2] / md5[2:]


def _safe_relpath(relpath: str) -> bool:
    parts = PurePosixPath(relpath).parts
    return bool(parts) and not PurePosixPath(relpath).is_absolute() and not {"", ".", ".."} & set(parts)


def _copy_from_folder(version: DataVersion, out: Path, cache: Path) -> dict[str, str] | None:
    """DVC's pull from a folder remote: the version's listing and objects into `cache` (read-only, as DVC leaves
    them), hard-linked into `out`; the xxh3-128 of each file copied now, hashed as it was written. None, nothing
    copied, when the remote is not such a folder or lacks the listing; a listing that does not hash to the
    version, or names an object the folder lacks, raises `HydrationError` (the caller's check would refuse the
    copy anyway)."""
    folder = _remote_folder(version.remote)
    listed = listing_path(folder, version.data_version) if folder is not None else None
    if listed is None or not listed.is_file():
        return None
    entry = listing_path(cache, version.data_version)
    entry.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(listed, entry)
    files = dvc_listing(cache, version.data_version)  # checked against the version first
    if not all(MD5.match(md5) and _safe_relpath(name) for name, md5 in files.items()):
        raise HydrationError(f"DVC's listing of data version {version.data_version} names a file or object unsafely")
    hashed, made = {}, {out}
    for name, md5 in sorted(files.items()):
        cached, target = _object(cache, md5), out / name
        _make_parent(target, made)
        if cached.is_file():  # an earlier pull's object, or this listing's twin of one: the check reads it
            _place(cached, target)
            continue
        _make_parent(cached, made)
        partial = cached.with_name(f"{cached.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            digest = _copy_read_only(_object(folder, md5), partial)
        except FileNotFoundError:
            partial.unlink(missing_ok=True)
            raise HydrationError(f"data version {version.data_version}: {version.remote} lacks {name}") from None
        # Linked before it is renamed into the cache: a concurrent hydration may replace `cached` meanwhile, and
        # the digest vouches only for the bytes this process wrote.
        if _place(partial, target):
            hashed[name] = digest
        os.replace(partial, cached)  # whole or not at all: a concurrent hydration links only whole objects
    return hashed


def _place(source: Path, target: Path) -> bool:
    """`source` hard-linked at `target` (True), or copied there from another file system, as DVC's
    "hardlink,copy" (False: a second copy, which the check reads again)."""
    try:
        os.link(source, target)
        return True
    except OSError:
        shutil.copyfile(source, target)
        return False


def _make_parent(path: Path, made: set[Path]) -> None:
    """`path`'s folder, asked of the file system once a hydration (a new folder costs ~0.1 ms here)."""
    if path.parent not in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        made.add(path.parent)


# Hashed and written a slice at a time, while the slice is in the CPU's cache (bench/README.md, the vision section).
COPY_CHUNK = 1 << 20


def _copy_read_only(source: Path, target: Path) -> str:
    """`source`'s bytes into a new read-only file (as DVC leaves its cache); their xxh3-128, hashed on the way.

    One pass, from `source` mapped into memory: not the kernel's sendfile then a second read to check the copy
    (15-19 ms against 22-26 ms for 48 MiB in 8 files, `cp -r` 16-17 ms: bench/README.md, the vision section). The
    remote's objects are written whole and renamed into place, never rewritten, so the mapping cannot shrink."""
    hasher = hasher_of(FAST)
    with open(source, "rb") as src:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        with open(fd, "wb", closefd=True) as dst:  # buffered: it writes a large slice whole, or raises
            if not os.fstat(src.fileno()).st_size:
                return hasher.hexdigest()  # an empty file cannot be mapped
            with mmap.mmap(src.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as whole:
                for start in range(0, len(whole), COPY_CHUNK):
                    with whole[start : start + COPY_CHUNK] as chunk:
                        hasher.update(chunk)
                        dst.write(chunk)
    return hasher.hexdigest()


def _pull(version: DataVersion, scratch: Path, cache: Path) -> None:
    """Pull one version into `scratch/prepared` through a throwaway DVC repo that knows only its hash."""
    with chdir(scratch):
        # Hard links: the checkout costs no second copy, and DVC makes the files read-only.
        repo = init_dvc(scratch, version.remote, cache_dir=cache, link="hardlink,copy")
        (scratch / "prepared.dvc").write_text(yaml.safe_dump({"outs": [version.dvc_out]}))
        try:
            repo.pull(targets=["prepared.dvc"], remote=REMOTE_NAME)
        except Exception as exc:
            raise HydrationError(
                f"node {os.uname().nodename} cannot hydrate data version {version.data_version} "
                f"from {version.remote}: {exc}"
            ) from exc
        finally:
            repo.close()
