"""What the stages hand each other: typed values, so a reader knows every field without reading the writer.

Pydantic models, frozen: Prefect persists and restores them (the cached `dataset` task returns a
`DataVersion`), and they print and compare as values. A model's metrics are any registered metrics type
(`foundry.core.metrics.kinds`): a new workload's, defined in its folder, needs no edit here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from foundry.core.energy import RunEnergy
from foundry.core.metrics.aligned import AlignmentMetrics
from foundry.core.metrics.baselines import AnyBaselined
from foundry.core.metrics.holdout import HoldoutMetrics

# imported to register it (`foundry.core.metrics.kinds`), so that stored candidates' image metrics load
from foundry.core.metrics.images import VisionMetrics  # noqa: F401
from foundry.core.metrics.kinds import AnyMetrics
from foundry.core.model_uri import ModelUri


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SourceFile(_Value):
    """One file of a source, fingerprinted; for a remote file, also what its origin said when last asked."""

    path: str  # absolute, for reading
    name: str  # relative to the source root (with the source's index when there are several)
    size: int
    sha256: str
    origin: str = ""  # the URL or s3:// URI it was fetched from; empty for local files
    etag: str = ""  # the origin's ETag, when it sends one
    last_modified: str = ""  # the origin's Last-Modified (http) or LastModified (s3), as it said it
    checked_at: str = ""  # when the origin was last asked (UTC, ISO 8601)


class SourceManifest(_Value):
    """What `acquire` found: the same files give the same digest wherever they live."""

    source: str
    digest: str
    files: int
    bytes: int
    entries: list[SourceFile]
    sources: list[str] = []  # absent from manifests logged before several sources were read
    skipped: dict[str, int] = {}

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=1))
        return path

    @classmethod
    def read(cls, path: Path) -> SourceManifest:
        return cls.model_validate_json(Path(path).read_text())

    def new_since(self, earlier: SourceManifest) -> list[str]:
        """Names of files whose content `earlier` did not have (by sha256, wherever they sit)."""
        seen = {entry.sha256 for entry in earlier.entries}
        return [entry.name for entry in self.entries if entry.sha256 not in seen]


DATA_VERSION = re.compile(r"[0-9a-f]{32}")  # DVC's md5 of the dataset's `.dir` listing, without `.dir`
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,255}")  # MLflow's run id format: one path component


def check_data_version(value: str) -> str:
    """A data version, when it is one; else ValueError. It names a folder (`hydrated/<version>/`), so a
    registry tag or manifest that says otherwise must stop the run, not pick a path."""
    if not isinstance(value, str) or not DATA_VERSION.fullmatch(value):
        raise ValueError(f"{value!r} is not a data version (32 hex digits, DVC's md5 of the dataset listing)")
    return value


class DataVersion(_Value):
    """A prepared dataset as DVC versioned it: its content hash and the remote holding it (a DVC remote URL,
    handed to DVC; only hydration reads a folder remote itself, in DVC's layout, checking every name it joins)."""

    data_version: str
    remote: str

    @field_validator("data_version")
    @classmethod
    def _is_a_digest(cls, value: str) -> str:
        return check_data_version(value)

    @property
    def dvc_out(self) -> dict[str, str]:
        """The `outs` entry of a `.dvc` file that names exactly this version."""
        return {"path": "prepared", "hash": "md5", "md5": f"{self.data_version}.dir"}


class ParentData(_Value):
    """The champion's data version, hydrated on this node: its split ledger, which a new data version builds
    on, and its holdout, which the forgetting guard scores."""

    model_uri: str  # models:/NAME/VERSION whose data this is
    data: DataVersion
    dir: Path  # $FOUNDRY_HOME/hydrated/<version>/
    ledger_digest: str  # identity of its ledger files: part of the dataset cache key


class Replay(_Value):
    """The base's pretraining data, hydrated on this node, whose training split an alignment run replays windows of
    (`align.replay_fraction`): what the align flow found, handed to the trainer and its ranks beside the config."""

    data: DataVersion  # the base's `pretrain.data_version`: part of the resume key, logged as align.replay_source
    dir: Path  # $FOUNDRY_HOME/hydrated/<version>/

    def write(self, path: Path) -> Path:
        path.write_text(self.model_dump_json())
        return path

    @classmethod
    def read(cls, path: Path) -> Replay:
        return cls.model_validate_json(Path(path).read_text())


class ParentModel(_Value):
    """A registered version a run starts from: where its files are and what it was trained with."""

    uri: str  # models:/NAME/VERSION
    weights: str  # model.pt
    tokenizer: str  # tokenizer.json
    config: dict[str, Any]
    source_manifest: SourceManifest
    # Its data version, hydrated: the ledger a retrain builds on (`fetch_champion`); None for a version fetched
    # to align from (`fetch_version`), which builds on no ledger.
    data: ParentData | None = None
    # The data the base model it descends from was pretrained on: the holdout alignment must not forget.
    pretrain_data: DataVersion | None = None


class Promotion(_Value):
    """A registered version and what the gate made of it: `challenger` always, `champion` when promoted."""

    version: str
    promoted: bool
    verdict: str


class RunContext(_Value):
    """The MLflow run every stage of a flow logs to, and the folder for this run's files."""

    run_id: str
    dir: Path  # $FOUNDRY_HOME/runs/<run_id>/
    home: Path

    @field_validator("run_id")
    @classmethod
    def _one_component(cls, value: str) -> str:
        if not RUN_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not an MLflow run id (letters, digits, '_' and '-')")
        return value


class Candidate(_Value):
    """A trained model and what it was trained and scored on: what the gate judges and the registry publishes."""

    checkpoint: Path  # model.pt
    data: DataVersion
    data_dir: Path  # the hydrated data version: tokenizer.json, manifest.json, the holdout
    # A trained model's (`HoldoutMetrics`), an aligned model's (`AlignmentMetrics`), a classifier's (`VisionMetrics`):
    # any registered metrics type (`foundry.core.metrics.kinds`), a new workload's too.
    metrics: AnyMetrics
    run: RunContext

    @property
    def tokenizer(self) -> Path:
        return self.data_dir / "tokenizer.json"


class PipelineResult(_Value):
    """What a training flow returns, and what `foundry run` and `foundry retrain` print."""

    run_id: str
    model_name: str
    model_version: str
    data_version: str
    metrics: AnyBaselined  # a language model's or an image classifier's: any registered type scored beside baselines
    promoted: bool
    verdict: str
    parent: str = ""
    energy: RunEnergy = RunEnergy()  # what each stage of its run used (`foundry.energy`)

    @property
    def model_uri(self) -> str:
        return str(ModelUri(name=self.model_name, version=self.model_version))

    @classmethod
    def of(cls, candidate: Candidate, model_name: str, outcome: Promotion, parent: str = "") -> PipelineResult:
        """The result of a flow that trained `candidate` (holdout metrics) and published it as `outcome`, with the
        energy its run's stages recorded in the run's folder."""
        return cls(
            run_id=candidate.run.run_id,
            model_name=model_name,
            model_version=outcome.version,
            data_version=candidate.data.data_version,
            metrics=candidate.metrics,
            promoted=outcome.promoted,
            verdict=outcome.verdict,
            parent=parent,
            energy=RunEnergy.read(candidate.run.dir),
        )


class SkippedRun(_Value):
    """A retrain that found nothing new: recorded, nothing trained."""

    run_id: str
    parent: str
    reason: str


class Reproduction(_Value):
    """A registered model re-trained from its lineage: recorded and reproduced holdout metrics."""

    model: str
    run_id: str
    comparison: dict[str, tuple[float, float]]  # metric -> (recorded, reproduced)
    identical: bool
    commit_matches: bool
    tree_clean: bool = True  # neither the training run's tree nor this one held uncommitted code


class FetchedFile(_Value):
    """What the origin of one remote source file said when a run acquired it (from its source manifest)."""

    name: str
    origin: str  # the URL or s3:// URI
    etag: str
    last_modified: str
    checked_at: str
    sha256: str


class LineageRecord(_Value):
    """One registered version traced back: its run, data version, source, code, packages and config."""

    model: str  # models:/NAME/VERSION
    aliases: list[str]
    run_id: str
    run_status: str
    data_version: str
    data_remote: str
    data_source: str
    data_source_digest: str
    git_commit: str
    git_dirty: str
    parent_model: str  # models:/NAME/VERSION it was fine-tuned from, several comma-separated for a merge, or ""
    packages: dict[str, str]
    config: dict[str, Any]
    holdout_bits_per_byte: str
    remote_files: list[FetchedFile] = []  # empty for runs whose sources were all local
    merge_recipe: str = ""  # a merge's recipe (JSON: method, parents, base, weights); "" for a trained version


class AlignResult(_Value):
    """What the align flow returns, and what `foundry align` prints."""

    run_id: str
    model_name: str
    model_version: str
    data_version: str
    parent: str
    method: str
    metrics: AlignmentMetrics
    promoted: bool
    verdict: str
    energy: RunEnergy = RunEnergy()  # what each stage of its run used (`foundry.energy`)

    @property
    def model_uri(self) -> str:
        return str(ModelUri(name=self.model_name, version=self.model_version))


# --- hyperparameter search (flows/search.py) ---------------------------------------------------------


class TrialData(_Value):
    """A dataset the trials train on: one for each value of the searched tokenizer keys."""

    data_version: str
    remote: str
    data_dir: Path


class TrialJob(_Value):
    """One trial as the flow hands it to a worker: what to train, on what, and where to report."""

    study_name: str
    storage: str  # the Optuna storage, as the worker opens it
    trial_id: int
    number: int
    config: dict[str, Any]  # the trial's whole config (FoundryConfig as JSON)
    data: TrialData
    run_id: str  # its nested MLflow run
    checkpoint_dir: Path
    cores: list[int]  # the cores it is pinned to; [] leaves the worker's own
    tracking_uri: str


class TrialOutcome(_Value):
    """What a finished trial tells the study."""

    number: int
    state: str  # "complete", "pruned" or "diverged" (a loss that is not a number)
    value: float  # holdout bits per byte; for a pruned trial, its last reported validation bits per byte
    steps: int  # optimizer steps it trained
    train_seconds: float
    pruned_at_step: int | None = None
    metrics: HoldoutMetrics | None = None  # None for a pruned trial: it was not evaluated


class SearchResult(_Value):
    """What `foundry search` prints: the study, its parent MLflow run, counts and the best trial."""

    study_name: str
    storage: str
    run_id: str
    counts: dict[str, int]  # trial state -> trials
    best_number: int | None
    best_value: float | None
    best_params: dict[str, Any]
    best_config: Path | None
