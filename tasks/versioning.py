"""Stage A, version and hydrate: DVC makes the prepared dataset a content-addressed version.

The DVC workspace lives in `$FOUNDRY_HOME/workspace`: the project's `dvc.yaml`, a `params.yaml`
written from the run's config, the source manifest and the `prepared` output. Committing it
records the dataset's content hash in `dvc.lock`; that hash is the data version. Hydration pulls
exactly that hash from the remote into `$FOUNDRY_HOME/hydrated/<version>/`, as a training node would.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from contextlib import chdir, contextmanager
from pathlib import Path

import yaml

from foundry.config import FoundryConfig, to_yaml
from tasks.digests import fast_digest, sha256_file

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
REMOTE_NAME = "storage"


class HydrationError(RuntimeError):
    """A data version could not be fetched or did not verify."""


def remote_url(config: FoundryConfig, home: Path) -> str:
    return config.data.remote or str(home / "dvc-remote")


def code_dependencies() -> list[str]:
    """The project files `dvc.yaml` names as stage dependencies (the code that makes the data)."""
    stages = yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())["stages"]
    deps = {d for stage in stages.values() for d in stage.get("deps", [])}
    return sorted(d for d in deps if (PROJECT_ROOT / d).is_file())


def dataset_key(config: FoundryConfig, source_digest: str) -> str:
    """Same source content, same data-shaping params, same code: same dataset. The cache key of `dataset`."""
    code = {name: hashlib.sha256((PROJECT_ROOT / name).read_bytes()).hexdigest() for name in code_dependencies()}
    shaping = {
        "source_digest": source_digest, "data": config.data.model_dump(mode="json"),
        "tokenizer": config.tokenizer.model_dump(mode="json"), "block_size": config.model.block_size, "code": code,
    }
    return "dataset-" + hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()


def version_ref(data_version: str, remote: str) -> dict:
    """What hydration needs to fetch a version: its hash and the remote (size and file count are optional)."""
    return {"data_version": data_version, "remote": remote,
            "out": {"path": "prepared", "hash": "md5", "md5": f"{data_version}.dir"}}


def _s3_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def _init_dvc(root: Path, remote: str, cache_dir: Path | None = None, link: str | None = None):
    """A DVC repo at `root` (created if missing) with our remote and settings; opened after configuring,
    since a Repo reads its cache settings once."""
    from dvc.repo import Repo

    if not (root / ".dvc").exists():
        root.mkdir(parents=True, exist_ok=True)
        Repo.init(str(root), no_scm=True).close()
    with Repo(str(root)) as repo, repo.config.edit() as conf:
        conf["core"]["analytics"] = False
        conf["core"]["remote"] = REMOTE_NAME
        conf["remote"][REMOTE_NAME] = {"url": remote}
        if remote.startswith("s3://") and _s3_endpoint():  # MinIO, moto or any S3-compatible store
            conf["remote"][REMOTE_NAME]["endpointurl"] = _s3_endpoint()
        if cache_dir is not None:
            conf["cache"]["dir"] = str(cache_dir)
        if link is not None:
            conf["cache"]["type"] = link
    return Repo(str(root))


@contextmanager
def _workspace_lock(root: Path):
    """One pipeline at a time commits into the workspace; others wait their turn."""
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root.with_suffix(".lock"))):
        yield


def version_dataset(config: FoundryConfig, staged: Path, source_manifest: Path, home: Path) -> dict:
    """Move the validated dataset into the DVC workspace, commit it, push it; returns its version."""
    workspace = home / "workspace"
    remote = remote_url(config, home)
    # DVC resolves stage paths against the working directory, so operate from inside the workspace.
    with _workspace_lock(workspace), chdir(workspace):
        repo = _init_dvc(workspace, remote)
        for name in ["dvc.yaml", *code_dependencies()]:  # dvc.lock then records the code's hashes too
            (workspace / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(PROJECT_ROOT / name, workspace / name)
        (workspace / "params.yaml").write_text(to_yaml(config))
        shutil.copy(source_manifest, workspace / "source_manifest.json")
        shutil.rmtree(workspace / "prepared", ignore_errors=True)
        shutil.move(str(staged), workspace / "prepared")
        repo.commit(None, force=True)
        lock = yaml.safe_load((workspace / "dvc.lock").read_text())
        out = next(o for o in lock["stages"]["prepare"]["outs"] if o["path"] == "prepared")
        pushed = repo.push(remote=REMOTE_NAME)
        repo.close()
    version = out["md5"].removesuffix(".dir")
    log.info("dataset version %s pushed to %s (%s objects sent)", version, remote, pushed)
    return {"data_version": version, "remote": remote, "out": out}


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


def hydrate(version: dict, home: Path) -> Path:
    """`$FOUNDRY_HOME/hydrated/<version>/`, pulled from the remote and verified; cached by version."""
    hydrated = home / "hydrated"
    target = hydrated / version["data_version"]
    cache = hydrated / ".cache"
    if target.is_dir():
        listing = dvc_listing(cache, version["data_version"])
        if listing is not None and not verify_dataset(target, listing):
            return target
        log.warning("hydrated copy of %s is corrupt; fetching it again", version["data_version"])
        shutil.rmtree(target)
        shutil.rmtree(cache, ignore_errors=True)  # hard-linked: the cached copy is corrupt too
    scratch = hydrated / f".pull-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True)
    try:
        _pull(version, scratch, cache=cache)
        bad = verify_dataset(scratch / "prepared", dvc_listing(cache, version["data_version"]))
        if bad:
            raise HydrationError(f"data version {version['data_version']} failed checksum verification: {bad}")
        try:
            os.rename(scratch / "prepared", target)  # atomic: readers see all of it or none
        except OSError:
            if not target.is_dir():  # another process won the race with the same content
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _pull(version: dict, scratch: Path, cache: Path) -> None:
    """Pull one version into `scratch/prepared` through a throwaway DVC repo that knows only its hash."""
    with chdir(scratch):
        # Hard links: the checkout costs no second copy, and DVC makes the files read-only.
        repo = _init_dvc(scratch, version["remote"], cache_dir=cache, link="hardlink,copy")
        (scratch / "prepared.dvc").write_text(yaml.safe_dump({"outs": [version["out"]]}))
        try:
            repo.pull(targets=["prepared.dvc"], remote=REMOTE_NAME)
        except Exception as exc:
            raise HydrationError(
                f"node {os.uname().nodename} cannot hydrate data version {version['data_version']} "
                f"from {version['remote']}: {exc}"
            ) from exc
        finally:
            repo.close()
