"""`foundry evaluate`'s typed values, the models it scores and the data it scores them on.

    foundry evaluate models:/foundry-gpt/3 models:/foundry-gpt-contracts@champion --data /data/tickets

The data is a data version (32 hex digits, hydrated as `reproduce` hydrates one, from `data.remote`) or a source
that is not one yet (a folder, a URL, `stdlib://...`): that one is acquired and prepared by its workload's own
pipeline with the first model's settings, into the evaluation run's staging folder, on no parent's ledger and
never versioned. What the data holds decides its workload (`foundry.core.workload.for_data`), and the workload
how its models are scored, beside which baselines, and reported (`Workload.scoring()`, `foundry.evaluate.scoring`):
documents by bits per byte (`foundry.pretrain.scoring`), chat records by exact match (`foundry.align.scoring`),
images by accuracy (`foundry.vision.scoring`). Each workload's figures are its own fields of `ModelScores`, named in
its registration (`Registration.scores`) and defined in its folder (`foundry.pretrain.fields`, ...).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from foundry.config import FoundryConfig
from foundry.core.contracts import DATA_VERSION
from foundry.core.extended import Added, extended, fields_of, imported
from foundry.core.model_uri import LoggedModelUri, ModelUri
from foundry.core.redact import redact_url
from foundry.core.registrations import listed

log = logging.getLogger(__name__)


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
    kind: str = "text"  # its workload's name (`foundry.core.workload`): text, chat or image

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


class _SharedScores(_Value):
    """The fields of every model's scores, whatever its workload: `ModelScores`', with each registered workload's
    figures in their places (`Registration.scores`, `foundry.core.extended`)."""

    model: ModelRef
    tokenizer: str  # sha256 of its tokenizer.json, first 12 digits: who can compare loss with whom
    run_id: str = ""  # its evaluation run, once logged


def _workload_scores() -> list[Added]:
    """Each registered workload's own figures, in the order the workloads are listed."""
    return [added for r in listed() if r.scores for added in fields_of(imported(r.scores))]


# One model's figures: a language model's on documents (`metrics`, `groups`: `foundry.pretrain.fields`), an aligned
# model's on chats (`chat`: `foundry.align.fields`), a classifier's on images (`vision`: `foundry.vision.fields`).
ModelScores = extended(
    "ModelScores",
    _Value,
    _SharedScores,
    _workload_scores(),
    "run_id",
    doc="One model's figures on the holdout: on documents overall and per group of source files, or on chats.",
)


class Baselines(_Value):
    scores: dict[str, float]  # by `HoldoutMetrics.BASELINES` name; on images by `VisionMetrics.BASELINES` name
    train_bytes: int  # training text xz -9e and PPMd saw (0 on images)
    unit: str = "bits_per_byte"  # what the scores are: bits per byte, or accuracy on images
    groups: dict[str, dict[str, float]] = {}  # per group of source files (`foundry.pretrain.group_baselines`)
    absent: list[str] = []  # asked for (`evaluation.baselines`) but not scored: named in the report, no score


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
    return LoggedModelUri.id_in(source)


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
        model = str(ModelUri.of(version))
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
    from foundry.core.workload import REGISTERED, named

    settings: dict[str, Any] = {}
    for name in REGISTERED:  # a source only one workload's data comes from is read as that workload's
        settings.update(named(name).scoring().source_settings(data))
    return config.reading(data, **settings)


def hydrated_data(data: str, config: FoundryConfig, home: Path) -> EvaluationData:
    """A data version pulled from `data.remote` and verified, as `reproduce` hydrates one."""
    from foundry.core.contracts import DataVersion
    from foundry.data.hydrate import hydrate_version

    version = DataVersion(data_version=data, remote=config.data.remote)
    folder = hydrate_version(version, home)
    return described(data, folder, version.data_version, version.remote)


def described(asked: str, folder: Path, data_version: str | None, remote: str | None) -> EvaluationData:
    """The prepared data as the steps take it, its kind the workload whose data it is; data no workload scores
    (preference pairs) refused."""
    from foundry.core.workload import REGISTERED, for_data, named
    from foundry.data.manifest import DatasetManifest

    manifest = DatasetManifest.read(folder)
    if not any(manifest.kind in named(name).scoring().records for name in REGISTERED):
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
        kind=for_data(folder).name,
    )
