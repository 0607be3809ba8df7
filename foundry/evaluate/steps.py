"""`foundry evaluate`'s steps as the flow runs them (`tasks/evaluate.py` wraps each), and all of them in a row for
callers without Prefect (`evaluate_all`). Each step asks the data's workload (`scoring.scoring_of`)."""

from __future__ import annotations

from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.contracts import RunContext
from foundry.core.fs import remove_tree
from foundry.core.workload import REGISTERED, named
from foundry.energy.tracked import measured
from foundry.evaluate import report, runs
from foundry.evaluate.scores import (
    Baselines,
    Evaluation,
    EvaluationData,
    ModelRef,
    ModelScores,
    downloaded,
    hydrated_data,
    is_data_version,
)
from foundry.evaluate.scoring import STAGING, Source, scoring_of


def data_for(data: str, config: FoundryConfig, refs: list[ModelRef], run: RunContext) -> EvaluationData:
    """The data version hydrated, or the source (`config.data.source`, see `evaluate.source_config`) prepared
    into the run's staging folder by the first workload whose data it holds (`Scoring.prepared`, asked in the
    registry's order: images with the first classifier's image settings, chat records with the first aligned
    model's tokenizer, documents with the first model's). Models that cannot read the data are refused here,
    before any is scored."""
    if is_data_version(data):
        found = hydrated_data(data, config, run.home)
    elif refs[0].artifacts is None:
        raise ValueError(f"{refs[0].model}: download its files first: it decides how the source is prepared")
    else:
        source = Source(config, refs, run)
        found = next(d for name in REGISTERED if (d := named(name).scoring().prepared(source)) is not None)
    scoring_of(found).check_models(refs, found)
    return found


def baselines(data: EvaluationData, config: FoundryConfig) -> Baselines:
    """The data's baselines, once for every model (`Scoring.baselines`): on documents unigram, gzip, xz, xz -9e
    and PPMd, overall and per group; on images the majority class and the nearest class mean; none on chat."""
    return scoring_of(data).baselines(data, config)


def scored_and_logged(
    ref: ModelRef, data: EvaluationData, base: Baselines, config: FoundryConfig, run: RunContext
) -> ModelScores:
    """One model scored on the data, its evaluation run logged; the energy of its scoring added to the
    flow's run (`energy/evaluate/joules`: every model's together)."""
    with measured(run, "evaluate", config.energy):
        scores = scoring_of(data).score(ref, data, config, base)
    return scores.model_copy(update={"run_id": runs.log_model_run(run, scores, data, base)})


def compared(data: EvaluationData, base: Baselines, scores: list[ModelScores], run: RunContext) -> Evaluation:
    """The evaluation as one value, its comparison and chart logged on the run; the staging folder removed."""
    holdout, records = scoring_of(data).holdout(data)
    evaluation = Evaluation(
        data=data, holdout_bytes=holdout, baselines=base, models=scores, run_id=run.run_id, holdout_records=records
    )
    chart = report.chart(evaluation, run.dir / "evaluation.png")
    runs.log_comparison(run, data, base, report.comparison(evaluation), chart)
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
    prepared = data_for(data, config, refs, run)
    base = baselines(prepared, config)
    return compared(prepared, base, [scored_and_logged(ref, prepared, base, config, run) for ref in refs], run)
