"""Operating the fleet as Prefect tasks: `foundry evaluate`'s steps (`foundry.evaluate.steps`)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from foundry.core.contracts import RunContext
from foundry.evaluate.scores import Baselines, Evaluation, EvaluationData, ModelRef, ModelScores

COMPARISON = "evaluation-comparison"
GROUPS = "evaluation-groups"
HEADLINE = {"chat": "Exact match", "image": "Accuracy"}  # the table's figure by data kind


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
    """Unigram, gzip, xz, xz -9e and PPMd on the holdout, given the train split: once for every model (none on
    chat records)."""
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
    get_run_logger().info("%s: %s (run %s)", ref.model, headline(scores), scores.run_id)
    return scores


@task(name="compare", cache_policy=NO_CACHE)
def compare(data: EvaluationData, base: Baselines, scores: list[ModelScores], run: RunContext) -> Evaluation:
    """The comparison (markdown and chart on the run, table artifacts on the run page: overall and per group)."""
    from prefect.artifacts import create_table_artifact

    from foundry.evaluate.report import group_rows, rows
    from foundry.evaluate.steps import compared

    evaluation = compared(data, base, scores, run)
    create_table_artifact(
        rows(evaluation),
        key=COMPARISON,
        description=f"{HEADLINE.get(data.kind, 'Bits per byte')} on {data.label}",
        _sync=True,
    )
    if data.kind == "text" and evaluation.groups:  # documents: the same figures per group, beside its baselines
        create_table_artifact(
            group_rows(evaluation),
            key=GROUPS,
            description=f"Bits per byte by group of source files on {data.label}",
            _sync=True,
        )
    return evaluation
