"""Stage A as Prefect tasks: acquire, prepare, validate, version (one cached `dataset` task), hydrate."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE, CacheKeyFnPolicy

from foundry.config import FoundryConfig
from foundry.core import version_tags as tag
from foundry.core import workload
from foundry.core.contracts import DataVersion, ParentData, RunContext, SourceManifest
from foundry.data.validation_report import ValidationReport
from foundry.runtime import tracking
from tasks.locks import FlockLockManager, locks_folder


@task(name="acquire", cache_policy=NO_CACHE)
def acquire(config: FoundryConfig, run: RunContext) -> SourceManifest:
    """List and fingerprint the source files (or labelled images); the manifest is the DVC dependency of `prepare`."""
    path = run.dir / "source_manifest.json"
    manifest = workload.for_config(config).acquire(config, path)
    tracking.log_artifact(run.run_id, path, "data")  # what a later retrain compares against
    tracking.set_tags(run.run_id, {tag.DATA_SOURCE: config.data.source, tag.SOURCE_DIGEST: manifest.digest})
    tracking.log_metrics(run.run_id, {"data/source_files": manifest.files, "data/source_bytes": manifest.bytes})
    return manifest


@dataclass(frozen=True)
class DatasetJob:
    """What one dataset is made of: `config`'s data rules over the sources `acquire` listed (`source_manifest`), for
    the flow's run `run`; `parent`: the data a retrain or fine-tune builds on (its ledger keeps each document's
    split); `replay_fraction` (retraining): the share of the parent's training documents replayed."""

    config: FoundryConfig
    source_manifest: SourceManifest
    run: RunContext
    parent: ParentData | None = None
    replay_fraction: float | None = None


@task(name="prepare", cache_policy=NO_CACHE)
def prepare(job: DatasetJob) -> Path:
    """Clean, split (on the parent's ledger) and tokenize into this run's staging folder (on `data.workers`
    processes, or on Dask when `data.scheduler` is set); images (`data.modality` image): decode, de-duplicate, split and shard them."""
    from foundry.core.preparing import DataBasis
    from foundry.data.progress import PREPARE_PROGRESS, read_preparation
    from foundry.data.purged import purged_documents
    from tasks.artifacts import reported_progress
    from tasks.data_parallel import run_prepare

    config, run, parent = job.config, job.run, job.parent
    staged, report = run.dir / "prepared", run.dir / PREPARE_PROGRESS
    with reported_progress(report, config.data.progress_every_s, read_preparation):  # lines, on a terminal or not
        prepared = run_prepare(
            job.source_manifest,
            config,
            staged,
            progress=sys.stderr.isatty(),  # bars on a terminal only
            # a purge's documents, should a source still hold them
            basis=DataBasis(parent and parent.dir, job.replay_fraction, frozenset(purged_documents(run.home))),
            progress_file=report,
        )
    for name in workload.for_config(config).audit_files:
        tracking.log_artifact(run.run_id, staged / name, "data")
    tracking.log_metrics(run.run_id, {f"data/{k}": v for k, v in prepared.lineage.items()})
    if parent is not None:  # the drops and PII by reason are in the data-stage report
        get_run_logger().info("prepared against %s: %s", parent.model_uri, prepared.lineage)
    return staged


@task(name="validate", cache_policy=NO_CACHE)
def validate(
    config: FoundryConfig, staged: Path, run: RunContext, parent: ParentData | None = None
) -> ValidationReport:
    """The Great Expectations gate; its report is logged whether it passes or not."""
    from foundry.core.preparing import Validating
    from foundry.data.validate import validate_dataset

    report_path, docs = run.dir / "validation_report.json", run.dir / "validation_docs"
    try:
        return validate_dataset(Validating(staged, config, report_path, docs, parent and parent.dir))
    finally:
        if report_path.exists():
            tracking.log_artifact(run.run_id, report_path, "validation")
        if docs.exists():  # written only when the gate fails: GX data docs, open index.html
            tracking.log_artifact(run.run_id, docs, "validation_docs")


@task(name="version", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def version(config: FoundryConfig, staged: Path, source_manifest: SourceManifest, run: RunContext) -> DataVersion:
    """Commit the dataset in the DVC workspace and push it; the content hash is the data version."""
    from foundry.data.versioning import version_dataset

    return version_dataset(config, staged, source_manifest, run.home)


def _dataset_key(context, parameters: dict) -> str:
    from foundry.data.purged import purged_documents
    from foundry.data.versioning import dataset_key

    job: DatasetJob = parameters["job"]
    ledger = job.parent.ledger_digest if job.parent is not None else ""
    purged = purged_documents(job.run.home)
    return dataset_key(job.config, job.source_manifest.digest, ledger, job.replay_fraction, purged)


def dataset(job: DatasetJob) -> DataVersion:
    """The cached `dataset` task, its cache key locked: a second run with the same key waits for the first,
    then takes its data version instead of preparing the same data again."""
    policy = CacheKeyFnPolicy(cache_key_fn=_dataset_key).configure(
        isolation_level="SERIALIZABLE", lock_manager=FlockLockManager(locks_folder(job.run.home))
    )
    return dataset_task.with_options(cache_policy=policy)(job)


@task(name="dataset", persist_result=True, result_serializer="json")
def dataset_task(job: DatasetJob) -> DataVersion:
    """Prepare, validate and version, unless this source content with these params, this code and this parent
    ledger was versioned before: then Prefect's cache returns that data version and no compute is spent."""
    staged = prepare(job)
    validate(job.config, staged, job.run, job.parent)
    return version(job.config, staged, job.source_manifest, job.run)


@task(name="hydrate", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def hydrate(data: DataVersion, run: RunContext) -> Path:
    """Pull exactly that data version from the remote onto local storage; record it on the run."""
    from foundry.data import manifest as dataset_manifest
    from foundry.data.hydrate import hydrate_version

    data_dir = hydrate_version(data, run.home)
    manifest = dataset_manifest.DatasetManifest.read(data_dir)
    tracking.set_tags(run.run_id, {tag.DATA_VERSION: data.data_version, tag.DATA_REMOTE: data.remote})
    kind = workload.for_manifest(manifest)
    tracking.log_metrics(run.run_id, kind.data_metrics(manifest))
    tracking.log_dataset(run.run_id, data, manifest.source)
    for name in kind.data_files:
        tracking.log_artifact(run.run_id, data_dir / name, "data")
    return data_dir
