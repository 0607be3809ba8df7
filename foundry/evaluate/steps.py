"""`foundry evaluate`'s steps as the flow runs them (`tasks/fleet.py` wraps each), and all of them in a row for
callers without Prefect (`evaluate_all`)."""

from __future__ import annotations

from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.contracts import RunContext
from foundry.core.fs import remove_tree
from foundry.data.manifest import DatasetManifest
from foundry.evaluate import baselines as evaluate_baselines
from foundry.evaluate import chat, report, runs
from foundry.evaluate import images as evaluate_images
from foundry.evaluate.scores import (
    Baselines,
    Evaluation,
    EvaluationData,
    ModelRef,
    ModelScores,
    downloaded,
    hydrated_data,
    is_data_version,
    prepared_data,
    score_model,
)
from foundry.evaluation.holdout_metrics import HoldoutMetrics

STAGING = "prepared"  # under the run's folder: removed with the run's other staging when it fails


def data_for(data: str, config: FoundryConfig, refs: list[ModelRef], run: RunContext) -> EvaluationData:
    """The data version hydrated, or the source (`config.data.source`, see `evaluate.source_config`) prepared
    into the run's staging folder: chat records with the first aligned model's tokenizer (`evaluate_chat`),
    documents with the first model's, images with the first classifier's image settings (`evaluate_images`).
    Models of another modality than the data are refused here, before any is scored."""
    if is_data_version(data):
        found = hydrated_data(data, config, run.home)
    elif refs[0].artifacts is None:
        raise ValueError(f"{refs[0].model}: download its files first: it decides how the source is prepared")
    elif config.data.modality == evaluate_images.IMAGE or evaluate_images.first_modality(refs) == "image":
        evaluate_images.refuse_other_modality(refs, evaluate_images.IMAGE, config.data.source)
        found = evaluate_images.prepared_images(config, refs, run.dir / STAGING)
    else:
        found = source_data(config, refs, run)
    modality = evaluate_images.IMAGE if found.kind == "image" else evaluate_images.TEXT
    evaluate_images.refuse_other_modality(refs, modality, found.label)
    if modality == evaluate_images.IMAGE:
        evaluate_images.check_images(refs, found)
    return found


def source_data(config: FoundryConfig, refs: list[ModelRef], run: RunContext) -> EvaluationData:
    """A text source: chat records or documents."""
    from foundry.data.acquire import acquire_source

    run.dir.mkdir(parents=True, exist_ok=True)
    source = acquire_source(config.data, run.dir / "source_manifest.json")
    if chat.holds_chats(source, config):
        from foundry.align import split_ledger

        ledger = split_ledger.head(run.home)  # the alignments' splits here: what they trained on is not held out
        return chat.prepared_chats(source, config, refs, run.dir / STAGING, ledger)
    return prepared_data(config, source, refs[0].artifacts / "tokenizer.json", run.dir / STAGING)


def baselines(data: EvaluationData, config: FoundryConfig) -> Baselines:
    """Unigram under the data's tokenizer; gzip and xz after `evaluation.compression_context_bytes` of the train
    split's tail, xz -9e and PPMd after `evaluation.strong_context_bytes` of it; unigram, gzip and PPMd per group
    of source files too (`evaluate_baselines`). None for chat records: exact match has no compressor to compare with."""
    from foundry.evaluation.compressors import compression_baselines
    from foundry.evaluation.metrics import unigram_bits_per_byte

    if data.kind == "chat":
        return Baselines(scores={}, train_bytes=0)
    if data.kind == "image":
        return evaluate_images.image_baselines(data, config)
    e, manifest = config.evaluation, DatasetManifest.read(data.dir)
    scores = compression_baselines(data.dir, e.compression_context_bytes, e.strong_context_bytes)
    train_bytes = int(scores.pop("baseline_train_bytes"))
    scores["unigram_bits_per_byte"] = unigram_bits_per_byte(data.dir, manifest.vocab_size, manifest.holdout_bytes)
    named = {name: scores[f"{name}_bits_per_byte"] for name in HoldoutMetrics.BASELINES}
    groups = evaluate_baselines.group_baselines(data.dir, config, named)
    return Baselines(scores=named, train_bytes=train_bytes, groups=groups)


def scored_and_logged(
    ref: ModelRef, data: EvaluationData, base: Baselines, config: FoundryConfig, run: RunContext
) -> ModelScores:
    """One model scored on the data (documents or chat records), its evaluation run logged."""
    if data.kind == "image":
        scores = evaluate_images.score_images(ref, data.dir, config, base)
    else:
        scores = (chat.score_chats if data.kind == "chat" else score_model)(ref, data.dir, config)
    return scores.model_copy(update={"run_id": runs.log_model_run(run, scores, data, base)})


def compared(data: EvaluationData, base: Baselines, scores: list[ModelScores], run: RunContext) -> Evaluation:
    """The evaluation as one value, its comparison and chart logged on the run; the staging folder removed."""
    manifest, chats, images = DatasetManifest.read(data.dir), data.kind == "chat", data.kind == "image"
    holdout = (data.dir / "holdout.jsonl").stat().st_size if chats else 0 if images else manifest.holdout_bytes
    records = manifest.stats["holdout_records"] if chats else None
    if images:  # holdout images
        records = sum(manifest.image_counts.get("holdout", {}).values())
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
