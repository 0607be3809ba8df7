"""Scheduled retraining: fine-tune the champion on what is new in the source, promote through the gate.

Deployed by `foundry serve` (and prefect.yaml) on `retrain.cron`, weekly by default.
"""

from __future__ import annotations

import foundry  # noqa: F401  (environment before Prefect loads)
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from flows.train_pipeline import pipeline_run
from tasks import tracking
from tasks.pipeline import RunContext, acquire, dataset, evaluate, hydrate, judge, promote, register, train
from tasks.retrain import fetch_parent, fine_tune_config, new_files


@task(name="parent", cache_policy=NO_CACHE)
def parent_model(config: FoundryConfig) -> dict:
    """The champion this run starts from (downloaded once per version)."""
    from foundry.env import foundry_home

    return fetch_parent(config, foundry_home())


@task(name="whats-new", cache_policy=NO_CACHE)
def whats_new(source_manifest, parent: dict, run: RunContext) -> list[str]:
    """Source files the champion never saw; recorded on the run either way."""
    import json

    fresh = new_files(json.loads(source_manifest.read_text()), parent["source_manifest"])
    tracking.log_metrics(run.run_id, {"retrain/new_files": len(fresh)})
    tracking.set_tags(run.run_id, {"retrain.skipped": str(not fresh).lower()})
    get_run_logger().info("%d new source files since %s", len(fresh), parent["model"])
    return fresh


@flow(name="retrain", log_prints=True)
def retrain(config: FoundryConfig = FoundryConfig()) -> dict:
    """Acquire, compare with the champion's data, and only if something is new: version, fine-tune, judge, register."""
    parent = parent_model(config)
    tuned = fine_tune_config(config, parent)
    with pipeline_run(tuned) as run:
        tracking.set_tags(run.run_id, {"foundry.stage": "retrain", "parent_model": parent["model"]})
        source_manifest = acquire(tuned, run)
        if not whats_new(source_manifest, parent, run):
            return {"run_id": run.run_id, "skipped": True, "parent": parent["model"],
                    "reason": f"nothing new in {config.data.source} since {parent['model']}"}
        data = dataset(tuned, source_manifest, run)
        data_dir = hydrate(data, run)
        checkpoint = train(tuned, data_dir, data, run)
        metrics = evaluate(tuned, checkpoint, data_dir, run)
        decision = judge(tuned, metrics, data_dir, data, run)
        model_version = register(tuned, checkpoint, data_dir, data, metrics, decision, run, parent=parent["model"])
        outcome = promote(tuned, model_version, decision)
    return {"run_id": run.run_id, "skipped": False, "parent": parent["model"], "model_version": model_version,
            "data_version": data["data_version"], "metrics": metrics, **outcome}
