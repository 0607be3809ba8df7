"""Operating the fleet as Prefect tasks: `foundry evaluate`'s steps (`foundry.evaluate.steps`)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from foundry.core.contracts import RunContext
from foundry.evaluate.scores import Baselines, Evaluation, EvaluationData, ModelRef, ModelScores

COMPARISON = "evaluation-comparison"


@task(name="resolve-models", cache_policy=NO_CACHE)
def resolve_models(models: list[str]) -> list[ModelRef]:
    """Each URI to its version; a version the registry lacks, or a registry error, stops the flow here."""
    from foundry.evaluate.scores import resolve_models as resolve

    return resolve(models)


@task(name="download-models", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def download_models(refs: list[ModelRef], run: RunContext) -> list[ModelRef]:
    """Their weights and tokenizers, once per version under `$FOUNDRY_HOME/models/`."""
    from foundry.evaluate.scores import downloaded

    return [downloaded(ref, run.home) for ref in refs]


@task(name="evaluation-data", cache_policy=NO_CACHE)
def evaluation_data(data: str, config: FoundryConfig, refs: list[ModelRef], run: RunContext) -> EvaluationData:
    """The data version hydrated, or the source prepared (not versioned) with the first model's tokenizer (the
    first aligned model's for chat records)."""
    from foundry.evaluate.steps import data_for

    prepared = data_for(data, config, refs, run)
    get_run_logger().info("scoring on %s (%s)", prepared.label, prepared.dir)
    return prepared


@task(name="baselines", cache_policy=NO_CACHE)
def baselines(data: EvaluationData, config: FoundryConfig) -> Baselines:
    """The data's baselines on the holdout, once for every model (`Scoring.baselines`)."""
    from foundry.evaluate.steps import baselines as measure

    return measure(data, config)


@task(name="score-model", cache_policy=NO_CACHE, task_run_name="score-{ref.model}")
def score_model(
    ref: ModelRef, data: EvaluationData, base: Baselines, config: FoundryConfig, run: RunContext
) -> ModelScores:
    """One model with its own tokenizer, overall and per group (or exact match on chat records); its evaluation
    run linked to the version."""
    from foundry.evaluate.report import headline
    from foundry.evaluate.steps import scored_and_logged

    scores = scored_and_logged(ref, data, base, config, run)
    get_run_logger().info("%s: %s (run %s)", ref.model, headline(scores, data), scores.run_id)
    return scores


@task(name="compare", cache_policy=NO_CACHE)
def compare(data: EvaluationData, base: Baselines, scores: list[ModelScores], run: RunContext) -> Evaluation:
    """The comparison (markdown and chart on the run, table artifacts on the run page: overall, and those the
    data's workload adds, such as documents' per group of source files)."""
    from prefect.artifacts import create_table_artifact

    from foundry.evaluate.report import rows
    from foundry.evaluate.scoring import scoring_of
    from foundry.evaluate.steps import compared

    evaluation, scoring = compared(data, base, scores, run), scoring_of(data)
    create_table_artifact(rows(evaluation), key=COMPARISON, description=f"{scoring.figure} on {data.label}", _sync=True)
    for table in scoring.tables(evaluation):
        create_table_artifact(table.rows, key=table.key, description=table.description, _sync=True)
    return evaluation
