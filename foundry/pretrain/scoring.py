"""`foundry evaluate` on documents: language models scored on a text holdout, beside the compressors.

A source that is not a data version is acquired and prepared by the pipeline's own `prepare` (scrubbing, quality
rules, de-duplication, the content-hash holdout of `data.holdout_fraction`) with the first model's tokenizer, into
the evaluation run's staging folder. It is built on no parent's ledger and never versioned, so no model's split
ledger changes: its own ledger goes with the staging folder.

Each model is scored on the holdout with its own tokenizer (loss, perplexity, bits per byte), overall and per
group of source files (`group_baselines.group_of`). The baselines depend on the data alone and are computed once:
unigram under the data's tokenizer, and gzip, xz, xz -9e, PPMd and zpaq (`evaluation.baselines`) given the tail
of the data's train split before its holdout, as registration measures them; unigram, gzip and PPMd per group too
(`group_baselines`). Loss and perplexity are per token of a model's own tokenizer: models with different tokenizers
compare in bits per byte only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.core.redact import redact_url
from foundry.evaluate.report import best
from foundry.evaluate.runs import metric_key
from foundry.evaluate.scores import (
    Baselines,
    Evaluation,
    EvaluationData,
    ModelRef,
    ModelScores,
    described,
)
from foundry.evaluate.scoring import Scoring, Source, Table
from foundry.pretrain import report
from foundry.pretrain.fields import GroupScore
from foundry.pretrain.group_baselines import group_of

FIELDS = ("loss", "perplexity", "bits_per_byte", "tokens")  # a model's overall `eval/<field>`
GROUPS = "evaluation-groups"  # the table artifact of bits per byte by group


def is_language_model(ref: ModelRef) -> bool:
    """A language model: its tokenizer.json travels with it (no need to load its weights), or its model.pt does
    not say it is an image classifier."""
    from models.gpt import load_saved

    if ref.artifacts is None:
        raise ValueError(f"{ref.model}: download its files first (`downloaded`)")
    if (ref.artifacts / "tokenizer.json").is_file():
        return True
    return load_saved(ref.artifacts / "model.pt").get("modality") != "image"


def prepared_data(config: FoundryConfig, source, tokenizer: Path, out_dir: Path) -> EvaluationData:
    """`source` (`config.data.source` acquired) prepared into `out_dir` (a staging folder) with `tokenizer`: the
    pipeline's cleaning rules, on no parent ledger, never versioned."""
    from foundry.core.preparing import Preparing
    from foundry.pretrain.prepare import prepare

    prepare(Preparing(source, config.tokenizer_from(tokenizer), out_dir))
    return described(redact_url(config.data.source), out_dir, None, None)


@dataclass
class GroupTokens:
    """One group's holdout under a tokenizer: the ids of its first documents (up to the scoring cap), the bytes
    they hold, and the bytes of the whole group."""

    ids: list[int] = field(default_factory=list)
    encoded_bytes: int = 0
    bytes: int = 0


def holdout_groups(data_dir: Path, encode, cap: int) -> dict[str, GroupTokens]:
    """The holdout's documents by group (in order of first appearance), each encoded by `encode` (text to ids,
    end-of-text included) in corpus order until it holds `cap` tokens; the rest are only counted. One document in
    memory at a time."""
    groups: dict[str, GroupTokens] = {}
    with open(data_dir / "holdout.jsonl", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            group = groups.setdefault(group_of(record.get("source", "")), GroupTokens())
            size = len(record["text"].encode("utf-8"))
            group.bytes += size
            if len(group.ids) < cap:
                group.ids += encode(record["text"])
                group.encoded_bytes += size
    return groups


def score_model(ref: ModelRef, data_dir: Path, config: FoundryConfig) -> ModelScores:
    """The model's loss, perplexity and bits per byte on the holdout read with its own tokenizer, overall (as
    registration scores it: the first `evaluation.max_tokens`) and per group (the first that many of each)."""
    import numpy as np
    from tokenizers import Tokenizer

    from foundry.data.manifest import DatasetManifest
    from foundry.pretrain.holdout_metrics import LN2, group_nats, holdout_tokens, score
    from models.gpt import load_gpt
    from models.tokens import EOT

    if ref.artifacts is None:
        raise ValueError(f"{ref.model}: download its files first (`downloaded`)")
    e, manifest = config.evaluation, DatasetManifest.read(data_dir)
    model, tokenizer_path = load_gpt(ref.artifacts / "model.pt"), ref.artifacts / "tokenizer.json"
    holdout = holdout_tokens(data_dir, tokenizer_path)
    overall = score(model, holdout, manifest.holdout_bytes, e.batch_size, e.max_tokens, e.window_overlap)
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.encode_special_tokens = True  # a document's own `<|endoftext|>` is text, as in the shards
    eot, groups = tokenizer.token_to_id(EOT), {}
    encode = lambda text: [*tokenizer.encode(text).ids, eot]  # noqa: E731  (as the shards hold documents)
    for group, found in holdout_groups(data_dir, encode, e.max_tokens + 1).items():
        ids = np.asarray(found.ids, dtype=np.int64)
        nats, scored = group_nats(model, ids[: e.max_tokens + 1], e.batch_size, e.window_overlap)
        scored_bytes = found.encoded_bytes * scored / (len(ids) - 1)  # pro-rated when `max_tokens` cut it short
        groups[group] = GroupScore(
            bits_per_byte=nats / LN2 / scored_bytes, loss=nats / scored, tokens=scored, bytes=found.bytes
        )
    return ModelScores(
        model=ref,
        tokenizer=hashlib.sha256(tokenizer_path.read_bytes()).hexdigest()[:12],
        metrics=HoldoutMetrics(**overall),
        groups=groups,
    )


def baselines(data: EvaluationData, config: FoundryConfig) -> Baselines:
    """Unigram under the data's tokenizer; gzip and xz after `evaluation.compression_context_bytes` of the train
    split's tail, xz -9e, PPMd and the zpaq levels `evaluation.baselines` asks for after
    `evaluation.strong_context_bytes` of it; unigram, gzip and PPMd per group of source files too
    (`group_baselines`). An asked one that cannot be scored (no `zpaq` package) is named in `absent`."""
    from foundry.data.manifest import DatasetManifest
    from foundry.pretrain.compressors import absent_baselines, compression_baselines
    from foundry.pretrain.group_baselines import group_baselines
    from foundry.pretrain.holdout_metrics import unigram_bits_per_byte

    e, manifest = config.evaluation, DatasetManifest.read(data.dir)
    scores = compression_baselines(data.dir, e.compression_context_bytes, e.strong_context_bytes, e.baselines)
    train_bytes = int(scores.pop("baseline_train_bytes"))
    scores["unigram_bits_per_byte"] = unigram_bits_per_byte(data.dir, manifest.vocab_size, manifest.holdout_bytes)
    fields = {name: f"{name}_bits_per_byte" for name in HoldoutMetrics.BASELINES}
    named = {name: scores[field] for name, field in fields.items() if field in scores}
    groups = group_baselines(data.dir, config, named)
    return Baselines(scores=named, train_bytes=train_bytes, groups=groups, absent=absent_baselines(e.baselines))


class DocumentScoring(Scoring):
    figure = "Bits per byte"
    holding = "text"
    records = ("text",)
    others = "image classifiers"
    elsewhere = "an image data version, an image folder or sklearn://digits"

    def prepared(self, source: Source) -> EvaluationData:
        """Documents, prepared with the first model's tokenizer (asked last: any text source is documents)."""
        tokenizer = source.refs[0].artifacts / "tokenizer.json"
        return prepared_data(source.config, source.acquired, tokenizer, source.staging)

    def reads(self, ref: ModelRef) -> bool:
        return is_language_model(ref)

    def baselines(self, data: EvaluationData, config: FoundryConfig) -> Baselines:
        return baselines(data, config)

    def score(self, ref: ModelRef, data: EvaluationData, config: FoundryConfig, base: Baselines) -> ModelScores:
        return score_model(ref, data.dir, config)

    def holdout(self, data: EvaluationData) -> tuple[int, int | None]:
        from foundry.data.manifest import DatasetManifest

        return DatasetManifest.read(data.dir).holdout_bytes, None

    def metrics(self, scores: ModelScores) -> dict[str, float]:
        """`eval/<field>` overall, `eval/group/<group>/<field>` per group."""
        m = scores.metrics
        found = {metric_key(f): float(getattr(m, f)) for f in FIELDS if getattr(m, f) is not None}
        for group, g in scores.groups.items():
            found |= {metric_key(f, group): float(getattr(g, f)) for f in ("bits_per_byte", "loss", "tokens")}
        return found

    def baseline_metrics(self, baselines: Baselines) -> dict[str, float]:
        """Overall, per group (`eval/group/<group>/baseline/<name>_bits_per_byte`), and the training text they saw."""
        found = super().baseline_metrics(baselines)
        for group, scores in baselines.groups.items():
            found |= {metric_key(f"baseline/{name}_bits_per_byte", group): v for name, v in scores.items()}
        return found | {metric_key("baseline/train_bytes"): float(baselines.train_bytes)}

    def rows(self, evaluation: Evaluation) -> list[dict[str, str]]:
        return report.rows(evaluation)

    def comparison(self, evaluation: Evaluation) -> str:
        return report.comparison(evaluation)

    def outcome(self, evaluation: Evaluation) -> str:
        return best(evaluation.models, lambda m: m.metrics.bits_per_byte, "{:.4f} bits/byte", lowest=True)

    def headline(self, scores: ModelScores) -> str:
        return f"{scores.metrics.bits_per_byte:.4f} bits/byte"

    def chart(self, evaluation: Evaluation, path: Path) -> Path:
        return report.chart(evaluation, path)

    def tables(self, evaluation: Evaluation) -> list[Table]:
        """The same figures per group of source files, beside each group's baselines."""
        if not evaluation.groups:
            return []
        shown = f"Bits per byte by group of source files on {evaluation.data.label}"
        return [Table(GROUPS, report.group_rows(evaluation), shown)]


SCORING = DocumentScoring()
