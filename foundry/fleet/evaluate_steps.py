"""`foundry evaluate`'s steps as the flow runs them (`tasks/fleet.py` wraps each), and all of them in a row for
callers without Prefect (`evaluate_all`)."""

from __future__ import annotations

from pathlib import Path

from foundry.config import FoundryConfig
from foundry.contracts import RunContext
from foundry.data.manifest import DatasetManifest
from foundry.fleet import evaluate_report, evaluate_runs
from foundry.fleet.evaluate import (
    Baselines,
    Evaluation,
    EvaluationData,
    ModelRef,
    ModelScores,
    baselines,
    downloaded,
    hydrated_data,
    is_data_version,
    prepared_data,
    score_model,
)
from foundry.fs import remove_tree

STAGING = "prepared"  # under the run's folder: removed with the run's other staging when it fails


def data_for(data: str, config: FoundryConfig, first: ModelRef, run: RunContext) -> EvaluationData:
    """The data version hydrated, or the source (`config.data.source`, see `evaluate.source_config`) prepared
    into the run's staging folder with the first model's tokenizer."""
    if is_data_version(data):
        return hydrated_data(data, config, run.home)
    if first.artifacts is None:
        raise ValueError(f"{first.model}: download its files first: its tokenizer prepares the source")
    return prepared_data(config, first.artifacts / "tokenizer.json", run.dir / STAGING)


def scored_and_logged(
    ref: ModelRef, data: EvaluationData, base: Baselines, config: FoundryConfig, run: RunContext
) -> ModelScores:
    """One model scored on the data, its evaluation run logged."""
    scores = score_model(ref, data.dir, config)
    return scores.model_copy(update={"run_id": evaluate_runs.log_model_run(run, scores, data, base)})


def compared(data: EvaluationData, base: Baselines, scores: list[ModelScores], run: RunContext) -> Evaluation:
    """The evaluation as one value, its comparison and chart logged on the run; the staging folder removed."""
    holdout = DatasetManifest.read(data.dir).holdout_bytes
    evaluation = Evaluation(data=data, holdout_bytes=holdout, baselines=base, models=scores, run_id=run.run_id)
    chart = evaluate_report.chart(evaluation, run.dir / "evaluation.png")
    evaluate_runs.log_comparison(run, data, evaluate_report.comparison(evaluation), chart)
    discard(data, run)
    return evaluation


def discard(data: EvaluationData, run: RunContext) -> None:
    """A source prepared for this evaluation alone is not kept (a data version's hydrated copy is)."""
    staged = run.dir / STAGING
    if data.data_version is None and Path(data.dir) == staged and staged.exists():
        remove_tree(staged, within=run.dir)


def evaluate_all(models: list[ModelRef], data: str, config: FoundryConfig, run: RunContext) -> Evaluation:
    """Every step in this process: `models` resolved (`evaluate.resolve_models`), `config` read through
    `evaluate.source_config`."""
    refs = [downloaded(ref, run.home) for ref in models]
    prepared = data_for(data, config, refs[0], run)
    base = baselines(prepared.dir, config)
    return compared(prepared, base, [scored_and_logged(ref, prepared, base, config, run) for ref in refs], run)
