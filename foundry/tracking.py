"""MLflow bookkeeping: the experiment, the pipeline run, and the lineage every run carries.

Every call names its run id explicitly: tasks may run in other threads or processes, where
MLflow's "active run" is not the pipeline's.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.contracts import DataVersion, RunContext
from foundry.env import PROJECT_ROOT, foundry_home, package_versions, uses_embedded_mlflow


def client():
    from mlflow import MlflowClient

    return MlflowClient()


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
        return {"git_commit": "unknown", "git_dirty": "unknown"}
    return {"git_commit": commit, "git_dirty": str(bool(dirty)).lower()}


def version_tags() -> dict[str, str]:
    return {f"version.{name}": version for name, version in package_versions().items()}


def start_pipeline_run(config: FoundryConfig, run_name: str | None = None) -> str:
    """Create the run that every stage logs to; params are the flattened config."""
    from mlflow.entities import Param

    c = client()
    tags = {"foundry.stage": "pipeline", **git_state(), **version_tags()}
    run = c.create_run(experiment_id(config.registry.experiment), run_name=run_name, tags=tags)
    params = [Param(k, str(v)) for k, v in config.flat().items()]
    for start in range(0, len(params), 100):
        c.log_batch(run.info.run_id, params=params[start : start + 100])
    c.log_text(run.info.run_id, config.model_dump_json(indent=1), "config.json")
    return run.info.run_id


def log_metrics(run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, step) for k, v in metrics.items()]
    client().log_batch(run_id, metrics=batch)


def metric_history(run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in client().get_metric_history(run_id, key)]


def log_dataset(run_id: str, data: DataVersion, manifest: dict) -> None:
    """The data version as an MLflow dataset input: name, content digest and where it lives."""
    from mlflow.data.http_dataset_source import HTTPDatasetSource
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    source = HTTPDatasetSource(f"dvc+{data.remote}#{data.data_version}")  # a URI, not fetched
    dataset = MetaDataset(source=source, name=f"prepared-{data.data_version[:8]}", digest=data.data_version[:32])
    tags = [InputTag("mlflow.data.context", "training"), InputTag("source", manifest["source"])]
    client().log_inputs(run_id, datasets=[DatasetInput(dataset._to_mlflow_entity(), tags=tags)])


def set_tags(run_id: str, tags: dict[str, str]) -> None:
    c = client()
    for key, value in tags.items():
        c.set_tag(run_id, key, str(value))


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
    """One MLflow run for a whole flow, with a folder for its files; marked FAILED if anything raises."""
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
