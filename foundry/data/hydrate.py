"""Stage A, hydrate: pull exactly one data version from the DVC remote onto this node, and check it.

`$FOUNDRY_HOME/hydrated/<version>/` holds it, as a training node would: every file is checked
against the dataset's manifest (xxh3-128), the manifest against DVC's md5 for the version, and
the folder appears whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from contextlib import chdir
from pathlib import Path

import yaml

from foundry.contracts import DataVersion
from foundry.data.versioning import REMOTE_NAME, init_dvc
from foundry.digests import fast_digest, sha256_file

log = logging.getLogger(__name__)


class HydrationError(RuntimeError):
    """A data version could not be fetched or did not verify."""


def verify_dataset(data_dir: Path, listing: dict[str, str] | None = None) -> list[str]:
    """Files that differ from what the dataset says it holds (missing files included).

    The manifest lists every other file's xxh3-128 (datasets from before it did: the shards' sha256);
    `listing`, DVC's {file: md5} for the version, vouches for the manifest itself. Files are hashed in
    parallel threads: both hashes release the GIL on large buffers."""
    from concurrent.futures import ThreadPoolExecutor

    try:
        raw = (data_dir / "manifest.json").read_bytes()
        manifest = json.loads(raw)
    except (OSError, ValueError):
        return ["manifest.json"]
    if listing and listing.get("manifest.json") != hashlib.md5(raw).hexdigest():
        return ["manifest.json"]
    if "files" in manifest:
        expected, digest = manifest["files"], fast_digest
    else:
        expected, digest = {s["file"]: s["sha256"] for s in manifest["shards"]}, sha256_file

    def bad(name: str) -> bool:
        path = data_dir / name
        return not path.is_file() or digest(path) != expected[name]

    names = sorted(expected)
    with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1))) as pool:
        return sorted(name for name, is_bad in zip(names, pool.map(bad, names)) if is_bad)


def dvc_listing(cache: Path, data_version: str) -> dict[str, str] | None:
    """{file: md5} of a version, from the `.dir` object a pull left in the node's DVC cache."""
    entry = cache / "files" / "md5" / data_version[:2] / f"{data_version[2:]}.dir"
    try:
        return {e["relpath"]: e["md5"] for e in json.loads(entry.read_text())}
    except (OSError, ValueError):
        return None


def hydrate_version(version: DataVersion, home: Path) -> Path:
    """`$FOUNDRY_HOME/hydrated/<version>/`, pulled from the remote and verified; cached by version."""
    hydrated = home / "hydrated"
    target = hydrated / version.data_version
    cache = hydrated / ".cache"
    if target.is_dir():
        listing = dvc_listing(cache, version.data_version)
        if listing is not None and not verify_dataset(target, listing):
            return target
        log.warning("hydrated copy of %s is corrupt; fetching it again", version.data_version)
        shutil.rmtree(target)
        shutil.rmtree(cache, ignore_errors=True)  # hard-linked: the cached copy is corrupt too
    scratch = hydrated / f".pull-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True)
    try:
        _pull(version, scratch, cache=cache)
        bad = verify_dataset(scratch / "prepared", dvc_listing(cache, version.data_version))
        if bad:
            raise HydrationError(f"data version {version.data_version} failed checksum verification: {bad}")
        try:
            os.rename(scratch / "prepared", target)  # atomic: readers see all of it or none
        except OSError:
            if not target.is_dir():  # another process won the race with the same content
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


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
