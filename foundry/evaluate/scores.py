"""`foundry evaluate`: registered versions scored on data of one's choice, beside the baselines.

    foundry evaluate models:/foundry-gpt/3 models:/foundry-gpt-contracts@champion --data /data/tickets

The data is a data version (32 hex digits, hydrated as `reproduce` hydrates one, from `data.remote`) or a source
that is not one yet (a folder, a URL, `stdlib://...`): that one is acquired and prepared by the pipeline's own
`prepare` (scrubbing, quality rules, de-duplication, the content-hash holdout of `data.holdout_fraction`) with the
first model's tokenizer, into the evaluation run's staging folder. It is built on no parent's ledger and never
versioned, so no model's split ledger changes: its own ledger goes with the staging folder.

Each model is scored on the holdout with its own tokenizer (loss, perplexity, bits per byte), overall and per
group of source files (the top-level folder of each file's name in the source; with several sources, the
source's index). The baselines depend on the data alone and are computed once: unigram under the data's
tokenizer, and gzip, xz, xz -9e and PPMd given the tail of the data's train split before its holdout, as
registration measures them; unigram, gzip and PPMd per group too (`evaluate_baselines`). Loss and perplexity
are per token of a model's own tokenizer: models with different tokenizers compare in bits per byte only.

Data holding chat records (an alignment data version, or a source of chat `.jsonl` records, prepared by the align
flow's own `prepare_aligned` on this home's chat split ledger, read only: `evaluate_chat`) is scored otherwise:
each aligned model's greedy replies against the holdout's reference replies (exact match) and its response loss; a model without a chat template is
reported as not comparable.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from foundry.config import FoundryConfig, validate
from foundry.core.contracts import DATA_VERSION
from foundry.core.model_uri import ModelUri
from foundry.core.redact import redact_url
from foundry.evaluation.holdout_metrics import HoldoutMetrics
from foundry.vision.metrics import VisionMetrics

log = logging.getLogger(__name__)

TOP_LEVEL = "(top level)"  # the group of files at the root of the source


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelRef(_Value):
    """One model to score: the URI asked for, the version it resolved to, its logged model and its files."""

    asked: str  # as given: an alias URI stays visible beside the version it meant
    model: str  # models:/NAME/VERSION
    model_id: str | None  # MLflow 3 logged model (`models:/m-...`); None for versions logged before them
    artifacts: Path | None = None  # model.pt and tokenizer.json, once downloaded


class EvaluationData(_Value):
    """The data every model is scored on: a hydrated data version, or a source prepared for this evaluation."""

    asked: str  # the DATA argument, credentials masked
    dir: Path  # the prepared dataset folder (manifest, splits, shards, tokenizer)
    data_version: str | None = None  # set when the data is a DVC data version
    remote: str | None = None
    source: str  # the manifest's source (masked)
    source_digest: str
    kind: str = "text"  # documents (text), chat records, or image (a classification dataset)

    @property
    def name(self) -> str:
        """The MLflow dataset name: `prepared-<version[:8]>` as training records it, or `source-<digest[:8]>`."""
        return f"prepared-{self.data_version[:8]}" if self.data_version else f"source-{self.source_digest[:8]}"

    @property
    def digest(self) -> str:
        return self.data_version or self.source_digest[:32]

    @property
    def label(self) -> str:
        """How tables and run names name it."""
        return f"data version {self.data_version}" if self.data_version else f"{self.source} (not versioned)"


class GroupScore(_Value):
    bits_per_byte: float
    loss: float
    tokens: int
    bytes: int


class ChatScores(_Value):
    """An aligned model on chat data: the share of holdout conversations whose greedy reply is the reference
    reply, and nats per assistant token; both None when the model is not comparable (`note` says why)."""

    exact_match: float | None
    response_loss: float | None
    records: int  # holdout conversations scored
    note: str = ""


class ModelScores(_Value):
    """One model's figures on the holdout: on documents overall and per group of source files, or on chats."""

    model: ModelRef
    tokenizer: str  # sha256 of its tokenizer.json, first 12 digits: who can compare loss with whom
    metrics: HoldoutMetrics | None = None  # loss, perplexity, bits per byte, tokens (on documents)
    groups: dict[str, GroupScore] = {}
    chat: ChatScores | None = None  # on chat records
    vision: VisionMetrics | None = None  # an image classifier on images (`evaluate_images`)
    run_id: str = ""  # its evaluation run, once logged


class Baselines(_Value):
    scores: dict[str, float]  # by `HoldoutMetrics.BASELINES` name; on images by `VisionMetrics.BASELINES` name
    train_bytes: int  # training text xz -9e and PPMd saw (0 on images)
    unit: str = "bits_per_byte"  # what the scores are: bits per byte, or accuracy on images
    groups: dict[str, dict[str, float]] = {}  # per group of source files (`evaluate_baselines.GROUP_BASELINES`)


class Evaluation(_Value):
    """What `foundry evaluate` found, in the order the models were asked for."""

    data: EvaluationData
    holdout_bytes: int
    baselines: Baselines
    models: list[ModelScores]
    run_id: str  # the evaluation's own run; each model's run is its child
    holdout_records: int | None = None  # chat records: the holdout's conversations

    @property
    def one_tokenizer(self) -> bool:
        """Whether loss and perplexity compare: every model reads the text as the same tokens."""
        return len({m.tokenizer for m in self.models}) == 1

    @property
    def groups(self) -> list[str]:
        seen: dict[str, None] = {}
        for m in self.models:
            seen.update(dict.fromkeys(m.groups))
        return list(seen)


# --- models ------------------------------------------------------------------------------------


def model_id_of(version) -> str | None:
    """The logged model behind a version: its `model_id`, or the `models:/m-...` source the SQL store keeps."""
    found = getattr(version, "model_id", None)
    if found:
        return found
    source = version.source or ""
    return source.removeprefix("models:/") if source.startswith("models:/m-") else None


def resolve_models(uris: list[str]) -> list[ModelRef]:
    """Each URI to its version, in order, once each. Fails closed: a malformed URI, a version or alias the
    registry does not have, or a registry that does not answer stops the evaluation before any work."""
    from mlflow.exceptions import MlflowException

    from foundry.registry import versions

    if not uris:
        raise ValueError("name at least one model to evaluate (models:/NAME/VERSION or models:/NAME@ALIAS)")
    refs: dict[str, ModelRef] = {}
    for text in uris:
        uri = ModelUri.parse(text)
        try:
            version = versions.resolve(uri)
        except MlflowException as exc:
            if versions.absent(exc):
                raise LookupError(f"{text}: the registry has no such version or alias; nothing was evaluated") from exc
            raise
        model = f"models:/{version.name}/{version.version}"
        if model in refs:
            log.info("%s is %s, already listed: scored once", text, model)
            continue
        refs[model] = ModelRef(asked=text, model=model, model_id=model_id_of(version))
    return list(refs.values())


def downloaded(ref: ModelRef, home: Path) -> ModelRef:
    """The ref with its files, fetched once per version into `$FOUNDRY_HOME/models/`."""
    from foundry.registry import versions

    uri = ModelUri.parse(ref.model)
    return ref.model_copy(update={"artifacts": versions.download(versions.resolve(uri), home)})


# --- data --------------------------------------------------------------------------------------


def is_data_version(data: str) -> bool:
    return bool(DATA_VERSION.fullmatch(data))


def run_label(data: str) -> str:
    """DATA as a run name shows it: a data version's first 8 digits, or the source's last name, masked."""
    if is_data_version(data):
        return data[:8]
    shown = redact_url(data).rstrip("/")
    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", shown.rsplit("/", 1)[-1] or shown)[:40]


def source_config(config: FoundryConfig, data: str) -> FoundryConfig:
    """The config the data is read with: `data.source` set to DATA when it is a source (so that a deployment's
    allow-lists judge it as they judge any source); the config itself for a data version."""
    if is_data_version(data):
        return config
    raw = config.model_dump()
    raw["data"].update(source=data, sources=[])
    if data.startswith("sklearn://"):  # only images come from there (`foundry.vision.builtin`)
        raw["data"]["modality"] = "image"
    return validate(raw)


def hydrated_data(data: str, config: FoundryConfig, home: Path) -> EvaluationData:
    """A data version pulled from `data.remote` and verified, as `reproduce` hydrates one."""
    from foundry.core.contracts import DataVersion
    from foundry.data.hydrate import hydrate_version

    version = DataVersion(data_version=data, remote=config.data.remote)
    folder = hydrate_version(version, home)
    return described(data, folder, version.data_version, version.remote)


def prepared_data(config: FoundryConfig, source, tokenizer: Path, out_dir: Path) -> EvaluationData:
    """`source` (`config.data.source` acquired) prepared into `out_dir` (a staging folder) with `tokenizer`: the
    pipeline's cleaning rules, on no parent ledger, never versioned."""
    from foundry.data.prepare import prepare

    raw = config.model_dump()
    raw["tokenizer"]["from_file"] = str(tokenizer)
    prepare(source, validate(raw), out_dir, progress=False)
    return described(redact_url(config.data.source), out_dir, None, None)


def described(asked: str, folder: Path, data_version: str | None, remote: str | None) -> EvaluationData:
    from foundry.data.manifest import DatasetManifest

    manifest = DatasetManifest.read(folder)
    if manifest.kind not in ("text", "chat", "classification"):
        raise ValueError(
            f"{asked} holds {manifest.kind} records: `foundry evaluate` scores documents, chat records and "
            "images (preference pairs are not implemented)"
        )
    return EvaluationData(
        asked=asked,
        dir=folder,
        data_version=data_version,
        remote=remote,
        source=manifest.source,
        source_digest=manifest.source_digest,
        kind="image" if manifest.modality == "image" else manifest.kind,
    )


def group_of(source_name: str) -> str:
    """A document's group: the top-level folder of its file's name within the source."""
    head, sep, _ = source_name.partition("/")
    return head if sep else TOP_LEVEL


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


# --- scores ------------------------------------------------------------------------------------


def score_model(ref: ModelRef, data_dir: Path, config: FoundryConfig) -> ModelScores:
    """The model's loss, perplexity and bits per byte on the holdout read with its own tokenizer, overall (as
    registration scores it: the first `evaluation.max_tokens`) and per group (the first that many of each)."""
    import numpy as np
    from tokenizers import Tokenizer

    from foundry.data.manifest import DatasetManifest
    from foundry.evaluation.metrics import LN2, group_nats, holdout_tokens, score
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
