"""The pipeline: raw text to a registered, evaluated model, one Prefect task per stage.

Run it with `foundry run` (see `foundry run --help`), or from Python:

    from flows.train_pipeline import train_pipeline
    train_pipeline(config=FoundryConfig())
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import foundry  # noqa: F401  (telemetry off and $FOUNDRY_HOME wiring before Prefect loads)
from prefect import flow, runtime

from foundry.config import FoundryConfig
from foundry.env import foundry_home
from tasks import tracking
from tasks.pipeline import (
    RunContext, acquire, dataset, evaluate, hydrate, judge, promote, register, train,
)


@contextmanager
def pipeline_run(config: FoundryConfig, run_name: str | None = None) -> Iterator[RunContext]:
    """One MLflow run for the whole flow, marked FAILED if any stage raises."""
    home = foundry_home()
    run_id = tracking.start_pipeline_run(config, run_name=run_name or runtime.flow_run.name)
    tracking.set_tags(run_id, {"prefect.flow_run_id": str(runtime.flow_run.id)})
    run = RunContext(run_id=run_id, dir=home / "runs" / run_id, home=home)
    run.dir.mkdir(parents=True, exist_ok=True)
    ok = False
    try:
        yield run
        ok = True
    finally:
        tracking.end_run(run_id, ok)


@flow(name="train_pipeline", log_prints=True)
def train_pipeline(config: FoundryConfig = FoundryConfig()) -> dict:
    """Acquire, prepare, validate, version, hydrate, train, evaluate, judge, register and promote."""
    with pipeline_run(config) as run:
        source_manifest = acquire(config, run)
        data = dataset(config, source_manifest, run)  # prepare, validate, version: cached by content
        data_dir = hydrate(data, run)
        checkpoint = train(config, data_dir, data, run)
        metrics = evaluate(config, checkpoint, data_dir, run)
        decision = judge(config, metrics, data_dir, data, run)
        model_version = register(config, checkpoint, data_dir, data, metrics, decision, run)
        outcome = promote(config, model_version, decision)
    return {
        "run_id": run.run_id, "model_name": config.registry.model_name, "model_version": model_version,
        "data_version": data["data_version"], "metrics": metrics, **outcome,
    }
