"""The Prefect face of each stage: thin tasks that call the plain functions and log to MLflow.

Kept apart from the stage modules so those import without Prefect (the pyfunc model and the
DVC stage commands use them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from tasks import tracking


@dataclass(frozen=True)
class RunContext:
    """The MLflow run every stage logs to, and the folder for this run's files."""

    run_id: str
    dir: Path
    home: Path


@task(name="acquire", cache_policy=NO_CACHE)
def acquire(config: FoundryConfig, run: RunContext) -> Path:
    """List and fingerprint the source files; the manifest is the DVC dependency of `prepare`."""
    from tasks.acquire import acquire as acquire_source

    path = run.dir / "source_manifest.json"
    manifest = acquire_source(config.data, path)
    tracking.log_artifact(run.run_id, path, "data")  # what a later retrain compares against
    tracking.set_tags(run.run_id, {"data.source": config.data.source, "data.source_digest": manifest["digest"]})
    tracking.log_metrics(run.run_id, {"data/source_files": manifest["files"], "data/source_bytes": manifest["bytes"]})
    return path


@task(name="prepare", cache_policy=NO_CACHE)
def prepare(config: FoundryConfig, source_manifest: Path, run: RunContext) -> Path:
    """Clean, split and tokenize into this run's staging folder."""
    from tasks.prepare import run_prepare

    staged = run.dir / "prepared"
    manifest = run_prepare(json.loads(source_manifest.read_text()), config, staged)
    for name in ("audit.json", "audit.md"):  # per cleaning rule: counts and examples, never the PII itself
        tracking.log_artifact(run.run_id, staged / name, "data")
    get_run_logger().info("prepared %s", {k: v for k, v in manifest["stats"].items()})
    return staged


@task(name="validate", cache_policy=NO_CACHE)
def validate(config: FoundryConfig, staged: Path, run: RunContext) -> dict:
    """The Great Expectations gate; its report is logged whether it passes or not."""
    from tasks.validate import validate_dataset

    report_path, docs = run.dir / "validation_report.json", run.dir / "validation_docs"
    try:
        return validate_dataset(staged, config, report_path, docs_dir=docs)
    finally:
        if report_path.exists():
            tracking.log_artifact(run.run_id, report_path, "validation")
        if docs.exists():  # written only when the gate fails: GX data docs, open index.html
            tracking.log_artifact(run.run_id, docs, "validation_docs")


@task(name="version", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def version(config: FoundryConfig, staged: Path, source_manifest: Path, run: RunContext) -> dict:
    """Commit the dataset in the DVC workspace and push it; the content hash is the data version."""
    from tasks.versioning import version_dataset

    return version_dataset(config, staged, source_manifest, run.home)


def _dataset_key(context, parameters: dict) -> str:
    from tasks.versioning import dataset_key

    digest = json.loads(parameters["source_manifest"].read_text())["digest"]
    return dataset_key(parameters["config"], digest)


@task(name="dataset", cache_key_fn=_dataset_key, persist_result=True, result_serializer="json")
def dataset(config: FoundryConfig, source_manifest: Path, run: RunContext) -> dict:
    """Prepare, validate and version, unless this source content with these params and this code was
    versioned before: then Prefect's cache returns that data version and no compute is spent."""
    staged = prepare(config, source_manifest, run)
    validate(config, staged, run)
    return version(config, staged, source_manifest, run)


@task(name="hydrate", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def hydrate(data: dict, run: RunContext) -> Path:
    """Pull exactly that data version from the remote onto local storage; record it on the run."""
    from tasks.prepare import prepare_metrics
    from tasks.versioning import hydrate as hydrate_version

    data_dir = hydrate_version(data, run.home)
    manifest = json.loads((data_dir / "manifest.json").read_text())
    tracking.set_tags(run.run_id, {"data_version": data["data_version"], "data.remote": data["remote"]})
    tracking.log_metrics(run.run_id, prepare_metrics(manifest))
    tracking.log_dataset(run.run_id, data, manifest)
    for name in ("tokenizer.json", "manifest.json"):
        tracking.log_artifact(run.run_id, data_dir / name, "data")
    return data_dir


def train(config: FoundryConfig, data_dir: Path, data: dict, run: RunContext, resume: bool = True) -> Path:
    """The train task with `train.retries` Prefect retries; each retry resumes from the last checkpoint."""
    return train_task.with_options(retries=config.train.retries, retry_delay_seconds=5)(config, data_dir, data, run, resume)


@task(name="train", cache_policy=NO_CACHE)
def train_task(config: FoundryConfig, data_dir: Path, data: dict, run: RunContext, resume: bool = True) -> Path:
    """Lightning training; metrics stream to the pipeline's MLflow run.

    Unfinished training lives under a key of config and data version, so a retry, or a re-run of the
    same command after a crash, resumes it; finished, it moves to this run's folder. `resume=False`
    (reproduction) trains from scratch in this run's own folder, whatever earlier attempts left behind."""
    from tasks import checkpointing
    from tasks.launch import launch

    own = run.dir / "checkpoints"
    attempt = checkpointing.attempt_dir(run.home, config, data["data_version"]) if resume else own
    with checkpointing.claimed(attempt):
        launch(config, data_dir, attempt, run.run_id, data["data_version"])
        checkpoints = checkpointing.finish_attempt(attempt, own) if attempt != own else own
    for name in (checkpointing.LAST, checkpointing.MANIFEST):  # each once, at the end: no copy per save
        tracking.log_artifact(run.run_id, checkpoints / name, "checkpoints")
    return checkpoints / "model.pt"


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate(config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext) -> dict[str, float]:
    """Holdout loss, perplexity and bits per byte beside unigram, gzip and xz; generations; loss curve."""
    from tasks.evaluate import compression_bits_per_byte, evaluate as evaluate_model
    from tasks.generate import generate_texts
    from tasks.report import loss_curve
    from tasks.train import load_model
    from tokenizers import Tokenizer

    e = config.evaluation
    model = load_model(checkpoint)
    metrics = evaluate_model(model, data_dir / "tokenizer.json", data_dir, e.batch_size, e.max_tokens)
    baselines = compression_bits_per_byte(data_dir, e.compression_context_bytes)
    metrics.update({f"holdout/{k}": v for k, v in baselines.items()})
    tracking.log_metrics(run.run_id, metrics)
    tokenizer = Tokenizer.from_file(str(data_dir / "tokenizer.json"))
    completions = generate_texts(model, tokenizer, e.prompts, e.max_new_tokens, seed=e.generation_seed)
    tracking.client().log_table(run.run_id, {"prompt": e.prompts, "completion": completions}, "evaluation/generations.json")
    history = {key: tracking.metric_history(run.run_id, key) for key in ("train/loss", "val/loss")}
    tracking.log_artifact(run.run_id, loss_curve(history, run.dir / "loss_curve.png"), "evaluation")
    get_run_logger().info("holdout: %s", {k: round(v, 4) for k, v in metrics.items()})
    return metrics


@task(name="judge", cache_policy=NO_CACHE)
def judge(config: FoundryConfig, metrics: dict, data_dir: Path, data: dict, run: RunContext) -> dict:
    """The promotion gate's inputs and verdict: the champion is scored on this same holdout."""
    from tasks import registry
    from tasks.report import summary_table

    current = registry.champion(config.registry.model_name)
    champion_bpb = None if current is None else _champion_bits_per_byte(current, config, data_dir, data["data_version"])
    passed, verdict = registry.gate(metrics["holdout/bits_per_byte"], champion_bpb, config.evaluation.min_improvement)
    tracking.client().log_table(run.run_id, summary_table(metrics, champion_bpb), "evaluation/summary.json")
    decision = {
        "passed": passed, "verdict": verdict, "champion_bits_per_byte": champion_bpb,
        "champion_version": None if current is None else str(current.version),
        "challenger_bits_per_byte": metrics["holdout/bits_per_byte"], "min_improvement": config.evaluation.min_improvement,
    }
    tracking.set_tags(run.run_id, {"gate.verdict": verdict, "gate.passed": str(passed).lower()})
    return decision


@task(name="register", cache_policy=NO_CACHE)
def register(
    config: FoundryConfig, checkpoint: Path, data_dir: Path, data: dict, metrics: dict, decision: dict, run: RunContext,
    parent: str = "",
) -> str:
    """Log the pyfunc model and register it, with lineage, metrics, gate tags and a model card; all or nothing."""
    from tasks import registry
    from tasks.report import model_card
    from tasks.train import load_model

    uri = registry.log_model(run.run_id, checkpoint, data_dir / "tokenizer.json")
    run_tags = tracking.client().get_run(run.run_id).data.tags
    git = {k: run_tags.get(k, "unknown") for k in ("git_commit", "git_dirty")}
    manifest = json.loads((data_dir / "manifest.json").read_text())
    card = model_card(config, manifest, data, metrics, decision, load_model(checkpoint).num_params(), run.run_id, git)
    tags = {
        "run_id": run.run_id, "data_version": data["data_version"], "data.remote": data["remote"],
        "data.source": config.data.source, "data.source_digest": manifest["source_digest"], **git,
        "config": config.model_dump_json(), **tracking.package_versions(), **{k: f"{v:.6f}" for k, v in metrics.items()},
        **registry.gate_tags(decision), **({"parent_model": parent} if parent else {}),
    }
    return registry.register(uri, config.registry.model_name, run.run_id, tags, description=card)


@task(name="promote", cache_policy=NO_CACHE)
def promote(config: FoundryConfig, version: str, decision: dict) -> dict:
    """`challenger` always; `champion` when the gate passed and auto-promotion is on."""
    from tasks import registry

    return registry.promote(config.registry.model_name, version, decision["passed"] and config.registry.auto_promote, decision["verdict"])


def _champion_bits_per_byte(current, config: FoundryConfig, data_dir: Path, data_version: str) -> float:
    """The champion's score on this holdout: its recorded one if it was evaluated on it, else re-scored."""
    if current.tags.get("data_version") == data_version and "holdout/bits_per_byte" in current.tags:
        return float(current.tags["holdout/bits_per_byte"])
    from foundry.env import foundry_home
    from tasks.evaluate import evaluate as evaluate_model
    from tasks.registry import download
    from tasks.train import load_model

    artifacts = download(current, foundry_home())
    e = config.evaluation
    metrics = evaluate_model(load_model(artifacts / "model.pt"), artifacts / "tokenizer.json", data_dir, e.batch_size, e.max_tokens)
    score = metrics["holdout/bits_per_byte"]
    get_run_logger().info("champion v%s re-scored on data %s: %.4f bits/byte", current.version, data_version, score)
    return score
