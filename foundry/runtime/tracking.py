"""MLflow bookkeeping: the experiment, the pipeline run, and the lineage every run carries.

Every call names its run id explicitly: tasks may run in other threads or processes, where
MLflow's "active run" is not the pipeline's. Calls to a tracking server retry transient failures
(connection refused or reset, 408, 429, 5xx) with MLflow's own backoff (`MLFLOW_HTTP_REQUEST_MAX_RETRIES`,
7, and `MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR`, 2: about four minutes); then the call raises.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

from foundry.config import FoundryConfig
from foundry.core import version_tags as tag
from foundry.core.contracts import DataVersion, RunContext
from foundry.core.redact import redact_text, redact_url, without_credentials
from foundry.core.run_tags import DATASET_CONTEXT, DATASET_SOURCE, MLFLOW_GIT_COMMIT, PACKAGE_VERSION, STAGE, RunTags
from foundry.runtime import run_owner
from foundry.runtime.env import PROJECT_ROOT, foundry_home, package_versions, uses_embedded_mlflow

_READY: set[str] = set()  # tracking URIs whose store this process has opened


def client():
    from mlflow import MlflowClient
    from mlflow.tracking import get_tracking_uri

    uri = get_tracking_uri()
    if uri not in _READY:
        _open_store(uri)
        _READY.add(uri)
    return MlflowClient()


def _open_store(uri: str) -> None:
    """MLflow creates its tables when a process first opens an empty SQLite store, without a lock: two runs
    started together on a fresh $FOUNDRY_HOME both tried ("table ... already exists"). One at a time, here."""
    if not uri.startswith("sqlite:///"):
        return
    from filelock import FileLock
    from mlflow import MlflowClient

    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{database}.init.lock"):
        opened = MlflowClient(uri, registry_uri=uri)  # this database's stores, wherever the registry is
        opened.search_experiments(max_results=1)  # the tracking store's tables
        opened.search_registered_models(max_results=1)  # and the registry's


def experiment_id(name: str) -> str:
    """The experiment's id, creating it with artifacts under $FOUNDRY_HOME when MLflow is embedded."""
    c = client()
    experiment = c.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    location = (foundry_home() / "mlflow" / "artifacts").as_uri() if uses_embedded_mlflow() else None
    try:
        return c.create_experiment(name, artifact_location=location)
    except Exception:  # another process created it between our look-up and create
        experiment = c.get_experiment_by_name(name)
        if experiment is None:
            raise
        return experiment.experiment_id


# What decides what a run computes: the code and the pinned dependencies. Docs, tests and benchmarks do not.
CODE_PATHS = ("foundry", "flows", "tasks", "models", "dvc.yaml", "pyproject.toml")


def git_state(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """Commit and dirty flag of the code that runs ('unknown' outside a git checkout). Dirty: a change
    to a tracked file, or a file git does not track (and does not ignore), under `CODE_PATHS`."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all", "--", *CODE_PATHS],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {tag.GIT_COMMIT: "unknown", tag.GIT_DIRTY: "unknown"}
    return {tag.GIT_COMMIT: commit, tag.GIT_DIRTY: str(bool(dirty)).lower()}


def version_tags() -> dict[str, str]:
    return {PACKAGE_VERSION + name: version for name, version in package_versions().items()}


GIT_COMMIT = MLFLOW_GIT_COMMIT  # MLflow's own field; runs before it carried a `git_commit` tag


def standard_tags() -> dict[str, str]:
    """MLflow's own run fields (user, source name and type, git commit and branch) from its context helpers,
    with the commit of the code that runs rather than of whatever script started the process (pytest, a
    Prefect worker), and our dirty flag beside it (MLflow has no field for that)."""
    from mlflow.tracking.context.registry import resolve_tags

    git = git_state()
    tags = resolve_tags()
    if git[tag.GIT_COMMIT] != "unknown":
        tags[GIT_COMMIT] = git[tag.GIT_COMMIT]
    return {**tags, tag.GIT_DIRTY: git[tag.GIT_DIRTY]}


def run_git(run_tags: dict[str, str]) -> dict[str, str]:
    """{"git_commit", "git_dirty"} as a run recorded them (either tag name)."""
    return RunTags.git_of(run_tags)


def start_pipeline_run(config: FoundryConfig, run_name: str | None = None) -> str:
    """Create the run that every stage logs to; params are the flattened config. Runs of the experiment left
    RUNNING by a process of this host that has ended are marked FAILED first (`foundry.runtime.run_owner`)."""
    from mlflow.entities import Param

    c = client()
    tags = {STAGE: "pipeline", **standard_tags(), **version_tags(), **run_owner.owner_tags()}
    experiment = experiment_id(config.registry.experiment)
    run_owner.mark_stale_runs(c, experiment, foundry_home())  # runs whose process was killed
    run = c.create_run(experiment, run_name=run_name, tags=tags)
    params = [Param(k, str(v)) for k, v in config.flat().items()]
    for start in range(0, len(params), 100):
        c.log_batch(run.info.run_id, params=params[start : start + 100])
    c.log_text(run.info.run_id, redact_text(config.model_dump_json(indent=1)), "config.json")
    return run.info.run_id


def log_metrics(run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, step) for k, v in metrics.items()]
    client().log_batch(run_id, metrics=batch)


def link_metrics(run_id: str, keys: list[str], model_id: str) -> None:
    """The run's latest values of `keys` recorded on its logged model too (the model page shows them).
    Logged again with their own timestamp and step: the run's history keeps one point each."""
    from mlflow.entities import Metric

    c = client()
    batch = []
    for key in keys:
        latest = max(c.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
        batch.append(Metric(key, latest.value, latest.timestamp, latest.step, model_id=model_id))
    c.log_batch(run_id, metrics=batch)


def metric_history(run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in client().get_metric_history(run_id, key)]


def log_dataset(run_id: str, data: DataVersion, prepared_from: str) -> None:
    """The data version as an MLflow dataset input: name, content digest and where it lives; `prepared_from`
    is its manifest's `source`."""
    from mlflow.data.http_dataset_source import HTTPDatasetSource
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    source = HTTPDatasetSource(f"dvc+{redact_url(data.remote)}#{data.data_version}")  # a URI, not fetched
    dataset = MetaDataset(source=source, name=f"prepared-{data.data_version[:8]}", digest=data.data_version[:32])
    tags = [InputTag(DATASET_CONTEXT, "training"), InputTag(DATASET_SOURCE, redact_text(prepared_from))]
    client().log_inputs(run_id, datasets=[DatasetInput(dataset._to_mlflow_entity(), tags=tags)])


def set_tags(run_id: str, tags: dict[str, str]) -> None:
    """All in one call."""
    from mlflow.entities import RunTag

    client().log_batch(run_id, tags=[RunTag(key, str(value)) for key, value in tags.items()])


class UiLinks(NamedTuple):
    run: str
    version: str | None  # None: the run registered no version


def ui_links(experiment_id: str, run_id: str, model_name: str | None = None, version: str | None = None) -> UiLinks:
    """Pages of the MLflow UI: the tracking server's, or the `mlflow ui` that the run's summary tells people
    to start on port 5000 when MLflow is embedded."""
    uri = without_credentials(os.environ.get("MLFLOW_TRACKING_URI", ""))  # a link is shown and stored
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return UiLinks(
        run=f"{base}/#/experiments/{experiment_id}/runs/{run_id}",
        version=f"{base}/#/models/{quote(model_name)}/versions/{version}" if model_name and version else None,
    )


def log_artifact(run_id: str, path: Path, artifact_path: str | None = None) -> None:
    c = client()
    if path.is_dir():
        c.log_artifacts(run_id, str(path), artifact_path)
    else:
        c.log_artifact(run_id, str(path), artifact_path)


def end_run(run_id: str, ok: bool) -> None:
    client().set_terminated(run_id, "FINISHED" if ok else "FAILED")


@contextmanager
def pipeline_run(config: FoundryConfig, run_name: str, tags: dict[str, str]) -> Iterator[RunContext]:
    """One MLflow run for a whole flow, with a folder for its files; marked FAILED if anything raises, and
    then its staging folders are removed."""
    home = foundry_home()
    run_id = start_pipeline_run(config, run_name=run_name)
    set_tags(run_id, tags)
    run = RunContext(run_id=run_id, dir=home / "runs" / run_id, home=home)
    run.dir.mkdir(parents=True, exist_ok=True)
    ok = False
    try:
        yield run
        ok = True
    finally:
        end_run(run_id, ok)
        if not ok:
            run_owner.remove_scratch(home, run_id)
