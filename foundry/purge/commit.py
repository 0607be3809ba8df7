"""`foundry purge --apply`, step 5: a rewritten dataset becomes a data version, and the old version goes.

`commit` hashes a staged dataset folder with DVC itself (a throwaway repo under `$FOUNDRY_HOME/.purge-<hex>`
whose cache is the workspace's), so the version is what `version_dataset` would have made of the same files and
`hydrate_version` pulls and verifies it the same way; it is pushed with DVC's own push to each remote given,
local or `s3://` (`purge_s3.S3Store`). The workspace's checked-out `prepared/`, `dvc.lock` and params are not
touched.

`delete_version` removes the old version's `.dir` listing and the objects it lists from every
store (workspace cache, hydration cache, local and S3 remotes), except objects a version that stays still lists
(`keep`, from `kept_objects`), and removes its hydrated copy and the workspace's `prepared/` if it is that
version. Everything is removed through `foundry.core.fs`, confined to the store or folder it lies in; a version or
object id is checked to be an md5 before it becomes part of a path. Both are idempotent: a purge stopped half-way
is run again.

An S3 error (`purge_s3.RemoteError`) stops either where it happens: a push not verified is never followed by a
deletion, and a deletion stopped leaves the listing, so the next run finishes it. Remotes of other schemes are
out of scope: the plan reports them as unchecked, and `--apply` refuses while any is there.
"""

from __future__ import annotations

import shutil
import uuid
from contextlib import chdir
from pathlib import Path

import yaml

from foundry.core.contracts import check_data_version
from foundry.core.fs import remove_tree
from foundry.data.hydrate import verify_dataset
from foundry.data.versioning import REMOTE_NAME, _workspace_lock, init_dvc
from foundry.gc.scan import MD5
from foundry.purge.s3 import RemoteError, S3Store
from foundry.purge.stores import Places, Store

HYDRATED_COPY = "hydrated copy"
WORKSPACE = "workspace"


def commit(places: Places, staged: Path, remotes: list[Store | S3Store]) -> str:
    """The staged dataset folder as a data version (32 hex) in the workspace cache and each of `remotes`.

    The folder must verify against its own manifest (hydration would refuse it otherwise); it is copied, never
    moved. Each store is checked to hold the version whole before it is returned, so the caller may then delete
    the version it replaces. Committing the same folder again gives the same version."""
    staged = Path(staged)
    bad = verify_dataset(staged)
    if bad:
        raise ValueError(f"the staged dataset {staged} does not match its own manifest ({bad}); nothing committed")
    home, workspace = places.home, places.home / "workspace"
    cache = workspace / ".dvc" / "cache"
    scratch = home / f".purge-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(staged, scratch / "prepared")
        with _workspace_lock(workspace), chdir(scratch):
            version = _add(scratch, cache, remotes)
            for store in remotes:
                _push(scratch, cache, store)
    finally:
        remove_tree(scratch, within=home, ignore_errors=True)
    for store in (Store("workspace cache", cache), *remotes):
        if not store.whole(version):
            raise RuntimeError(f"data version {version} is not whole in the {store.place} {store.root} after commit")
    return version


def _add(scratch: Path, cache: Path, remotes: list[Store]) -> str:
    """`dvc add prepared` in the throwaway repo: DVC's own hashing, its objects and listing into `cache`."""
    remote = remotes[0].url if remotes else str(scratch / "no-remote")  # init_dvc names one; add never uses it
    repo = init_dvc(scratch, remote, cache_dir=cache)
    try:
        repo.add("prepared")
    finally:
        repo.close()
    (out,) = yaml.safe_load((scratch / "prepared.dvc").read_text())["outs"]
    return check_data_version(out["md5"].removesuffix(".dir"))


def _push(scratch: Path, cache: Path, store: Store | S3Store) -> None:
    repo = init_dvc(scratch, store.url, cache_dir=cache)  # the remote's URL, rewritten for each store
    try:
        repo.push(targets=["prepared.dvc"], remote=REMOTE_NAME)
    except Exception as exc:
        if isinstance(store, S3Store):  # DVC's own errors name no remote: say which, and that a re-run resumes
            raise RemoteError(f"DVC could not push to the remote {store.url} ({type(exc).__name__}: {exc})") from exc
        raise
    finally:
        repo.close()


def place_of(store: Store | S3Store) -> str:
    """A store's key in `delete_version`'s counts: remotes are told apart by their folder."""
    return f"remote {store.root}" if store.place == "remote" else store.place


def delete_version(places: Places, version: str, objects: set[str], keep: set[str]) -> dict[str, int]:
    """Remove a data version: files removed per place (`place_of` each store, `hydrated copy`, `workspace`).

    Its hydrated copy and, when the workspace has it checked out, the workspace's `prepared/`; then from every
    store each object of `objects` (md5s of the files it lists) that `keep` (md5s listed by versions that
    stay) does not name; then, last, every store's `.dir` listing: a listing still there after a purge stopped
    says the version is not finished (`unfinished`), and with no readable copy left the next run finishes it.
    A second call removes nothing and counts zeros."""
    check_data_version(version)
    doomed = sorted(_md5(m) for m in set(objects) - set(keep))
    home, workspace = places.home, places.home / "workspace"
    counts = dict.fromkeys((place_of(store) for store in places.stores), 0)
    with _workspace_lock(workspace):  # no version_dataset commits or checks out while objects go
        counts[HYDRATED_COPY] = _remove_folder(places.hydrated().get(version), home / "hydrated")
        counts[WORKSPACE] = _remove_folder(places.checked_out().get(version), workspace)
        for store in places.stores:
            for md5 in doomed:
                counts[place_of(store)] += store.remove(md5)
        for store in places.stores:  # the listings last (see above)
            counts[place_of(store)] += store.remove_listing(version)
    return counts


def unfinished(places: Places, versions: set[str]) -> dict[str, set[str]]:
    """Of `versions` (those a purge marked), each that a store still lists -> every object any store's listing of
    it names: a purge stopped while deleting it (its listing goes last)."""
    found: dict[str, set[str]] = {}
    for version in sorted(versions):
        for store in places.stores:
            if (listing := store.listing(version)) is not None:
                found.setdefault(version, set()).update(listing.values())
            elif store.listed(check_data_version(version)):  # there, but unreadable
                found.setdefault(version, set())
    return found


def kept_objects(places: Places, versions: set[str]) -> set[str]:
    """Every md5 the given versions list, in any store's listing of them. A version no store lists but a
    hydrated or checked-out folder holds counts by its files' md5s (what its listing would say). A version
    found nowhere here has no object here to protect."""
    kept: set[str] = set()
    for version in versions:
        check_data_version(version)
        listings = [found for store in places.stores if (found := store.listing(version)) is not None]
        if not listings and (files := places.files(version)) is not None:
            listings = [files.listing]
        kept.update(md5 for listing in listings for md5 in listing.values())
    return kept


def _md5(value: str) -> str:
    if not isinstance(value, str) or not MD5.fullmatch(value):
        raise ValueError(f"{value!r} is not a DVC object id (32 hex digits); nothing removed")
    return value


def _remove_folder(folder: Path | None, within: Path) -> int:
    if folder is None:
        return 0
    files = sum(1 for p in folder.rglob("*") if p.is_file() or p.is_symlink())
    remove_tree(folder, within=within)
    return files
