"""Stage A, version: DVC makes the prepared dataset a content-addressed version.

The DVC workspace lives in `$FOUNDRY_HOME/workspace`: the project's `dvc.yaml`, a `params.yaml`
written from the run's config, the source manifest and the `prepared` output. Committing it
records the dataset's content hash in `dvc.lock`; that hash is the data version, which
`foundry.data.hydrate` pulls onto training nodes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from contextlib import chdir, contextmanager
from pathlib import Path

import yaml

from foundry.config import FoundryConfig, to_yaml
from foundry.core import workload
from foundry.core.contracts import DataVersion, SourceManifest
from foundry.core.fs import remove_tree
from foundry.data.purged import digest as purged_digest
from foundry.runtime.env import PROJECT_ROOT, s3_endpoint_url

log = logging.getLogger(__name__)

REMOTE_NAME = "storage"


def remote_url(config: FoundryConfig, home: Path) -> str:
    return config.data.remote or str(home / "dvc-remote")


def code_dependencies() -> list[str]:
    """The project files `dvc.yaml` names as stage dependencies (the code that makes the data)."""
    stages = yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())["stages"]
    deps = {d for stage in stages.values() for d in stage.get("deps", [])}
    code = sorted(d for d in deps if d.endswith(".py"))
    missing = [d for d in code if not (PROJECT_ROOT / d).is_file()]
    if missing:  # a stale path would silently drop code from the dataset's identity
        raise FileNotFoundError(f"dvc.yaml names code that does not exist: {missing}")
    return code


# Data settings that change how sources are fetched, where and in how many pieces the map steps run and how progress
# is reported, not what the dataset holds (a download, archive or file refused by a limit leaves the source digest,
# which is part of the key; any workers and partitions give the same bytes: tests/slow/tasks/test_parallel.py).
NOT_SHAPING = {
    "fetch_retries",
    "fetch_backoff_s",
    "progress_every_s",
    "max_download_bytes",
    "max_archive_members",
    "max_file_bytes",
    "workers",
    "scheduler",
    "partition_bytes",
}


def dataset_key(
    config: FoundryConfig,
    source_digest: str,
    parent_ledger: str = "",
    replay_fraction: float | None = None,
    purged: set[str] | frozenset[str] = frozenset(),
) -> str:
    """Same source content, same data-shaping params, same code, same parent ledger (its digest; '' for none),
    replay share and purged documents (`foundry.data.purged`): same dataset. The cache key of `dataset`. The
    purged set joins the key only when a purge removed something, so keys made before purges existed stay."""
    code = {name: hashlib.sha256((PROJECT_ROOT / name).read_bytes()).hexdigest() for name in code_dependencies()}
    shaping = {
        "source_digest": source_digest,
        "parent_ledger": parent_ledger,
        "replay_fraction": replay_fraction,
        "data": config.data.model_dump(mode="json", exclude=NOT_SHAPING),
        "code": code,
    }
    shaping.update(workload.for_config(config).shaping(config))  # text: tokenizer and block size; images: `image`
    if purged:
        shaping["purged"] = purged_digest(purged)
    return "dataset-" + hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()


def init_dvc(root: Path, remote: str, cache_dir: Path | None = None, link: str | None = None):
    """A DVC repo at `root` (created if missing) with our remote and settings; opened after configuring,
    since a Repo reads its cache settings once."""
    from dvc.repo import Repo

    from foundry.runtime.logs import route_library_logs

    route_library_logs()  # DVC's console handlers print what the process's own print already
    if not (root / ".dvc").exists():
        root.mkdir(parents=True, exist_ok=True)
        Repo.init(str(root), no_scm=True).close()
    with Repo(str(root)) as repo, repo.config.edit() as conf:
        conf["core"]["analytics"] = False
        conf["core"]["remote"] = REMOTE_NAME
        conf["remote"][REMOTE_NAME] = {"url": remote}
        if remote.startswith("s3://") and s3_endpoint_url():  # MinIO, moto or any S3-compatible store
            conf["remote"][REMOTE_NAME]["endpointurl"] = s3_endpoint_url()
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


def version_dataset(config: FoundryConfig, staged: Path, source_manifest: SourceManifest, home: Path) -> DataVersion:
    """Move the validated dataset into the DVC workspace, commit it, push it; returns its version."""
    workspace = home / "workspace"
    remote = remote_url(config, home)
    # DVC resolves stage paths against the working directory, so operate from inside the workspace.
    with _workspace_lock(workspace), chdir(workspace):
        repo = init_dvc(workspace, remote)
        for name in ["dvc.yaml", *code_dependencies()]:  # dvc.lock then records the code's hashes too
            (workspace / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(PROJECT_ROOT / name, workspace / name)
        (workspace / "params.yaml").write_text(to_yaml(config))
        source_manifest.write(workspace / "source_manifest.json")
        remove_tree(workspace / "prepared", within=workspace, ignore_errors=True)
        shutil.move(str(staged), workspace / "prepared")
        repo.commit(None, force=True)
        lock = yaml.safe_load((workspace / "dvc.lock").read_text())
        out = next(o for o in lock["stages"]["prepare"]["outs"] if o["path"] == "prepared")
        pushed = repo.push(remote=REMOTE_NAME)
        repo.close()
    version = out["md5"].removesuffix(".dir")
    log.info("dataset version %s pushed to %s (%s objects sent)", version, remote, pushed)
    return DataVersion(data_version=version, remote=remote)
