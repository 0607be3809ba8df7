"""What a kind of model brings to Foundry, and the registry that finds it.

The trainer, the data stage and its run-page artifact, the gates' gathering and records, `foundry evaluate`, purge's
search and rewrite, fine-tuning (and its refusal of data of another modality) and registration ask a `Workload`
instead of branching on modality; `foundry run`'s summary asks the metrics' own type (`summary_rows`). A test keeps
modality branches inside the workload folders (`tests/fast/core/test_workload_branches.py`). Each workload lives in its
own folder and is registered once, in `REGISTERED` (kept in `foundry.core.registrations`, a plain table the config and
the manifest read too): the module holding its `WORKLOAD`, imported only when it is asked for (an image workload brings
Pillow, a chat one the alignment losses), its data's modality and the dataset kinds its manifests carry:

- `text` (`foundry.pretrain.workload`; modality text, kind text): documents as token shards, a GPT pretrained on them
- `chat` (`foundry.align.workload`; modality text, kinds chat and preference): conversations or preference pairs, a
  GPT aligned on them
- `image` (`foundry.vision.workload`; modality image, kind classification): labelled images in WebDataset shards, a
  classifier trained on them

A fourth workload (audio, video frames, tabular) is a new folder with a `WORKLOAD` value and a line in `REGISTERED`,
named as its modality where a config's `data.modality` is what selects it (`for_config`).
That line is all the tables of modalities and kinds need: `data.modality`'s values, the manifest's `modality` and
`kind` values and `MODALITY_OF_KIND`, and which workload reads a manifest (`Workload.reads`) are derived from it.
Its metrics type and gate inputs live in its folder too, and register themselves where they are defined
(`foundry.core.open_union`): a metrics type derives from `foundry.core.metrics.kinds.Metrics` (from
`foundry.core.metrics.baselines.BaselinedMetrics`, for a trained model's holdout beside baselines, with the
`summary_rows` `foundry run` prints) and names its `kind`; gate inputs derive from `foundry.gates.inputs.GateInputs`
(from `AgainstChampion` and `AgainstBase` for the pretraining and specialist rules, by a `Measure` of its own) and
name their `gate`. A candidate, a training flow's result and a decision then take them: no union lists them.
Outside its folder it adds no branch and edits no shared model: what it adds to them is named in its line too, by
import path, and lives in its folder (`foundry.core.extended` builds the shared models with them): its config
sections (`Section`, each a `foundry.core.config_section.ConfigSection` checking itself against the rest with
`misfit`, in the place of `FoundryConfig` it names), the fields only its datasets have (`manifest`: a pydantic model
whose fields `DatasetManifest` takes, required on its modality's datasets and refused on others'), its holdout figures
(`scores`: the fields `foundry.evaluate.scores.ModelScores` takes, one per workload so far: `metrics` and `groups`,
`chat`, `vision`; one field open to any metrics type would change the shape `foundry evaluate` hands on), and its
built-in source schemes (`sources`: `foundry.config.data.BUILTIN_SOURCES`).
After torchtitan's `TrainSpec`: checkpointing and resilience are the trainer's, not the workload's.
"""

from __future__ import annotations

import errno
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from pathlib import Path
from types import MappingProxyType
from typing import Any

from foundry.core.preparing import Preparing, Validating
from foundry.core.registrations import REGISTERED, Registration
from foundry.core.version_tags import VersionTags

# The types the methods take, by the names a reader knows (`foundry.config.FoundryConfig`, `foundry.data.manifest.
# DatasetManifest`, `foundry.purge.data.Matched`...). A workload's module imports them; this core module must not: it
# would reach up into the features that ask it. To a type checker here they are Any.
FoundryConfig = Candidate = ParentModel = SourceManifest = DatasetManifest = Prepared = Any
ValidationReport = Decision = Matched = VersionFiles = Criterion = DataHit = Location = Any


@dataclass(frozen=True)
class Purging:
    """How a purge goes through a workload's data versions: `matching(files, criterion)` finds what the criterion
    names, `locations(files, criterion, matched, shas, names)` every place that holds it, `rewrite(files, hit,
    gone, names, out)` the version without it (what `Workload.purge_*` describe)."""

    matching: Callable[..., Matched]
    locations: Callable[..., list[Location]]
    rewrite: Callable[..., dict[str, int] | None]


@dataclass(frozen=True)
class HomeLedger:
    """A split ledger a workload keeps under `$FOUNDRY_HOME/ledgers/` rather than in a data version: the folder of
    its generations, and the lock a rewrite of it holds against a preparation extending it meanwhile."""

    folder: Path
    locked: Callable[[], AbstractContextManager]


class Workload(ABC):
    """One kind of model: what the trainer, the gates, evaluate, purge and serving ask of it."""

    name: str  # "text", "chat", "image": the key in REGISTERED
    describes: str  # what its models are, as a refusal names them: "a text model", "an image classifier"

    # --- data, purge and serving ------------------------------------------------------------------

    # Whether `prepare`'s map steps can run on Dask workers (`data.workers`, `data.scheduler`); else in one process.
    prepares_on_workers: bool = False
    # Whether a fine-tune with no champion of its own prepares its data on its base's data version (its ledger and
    # whatever else must stay as the base had it), rather than from scratch.
    finetunes_on_base_data: bool = False
    # The plots (file names) that runs trained or evaluated on its data log and that show the data itself: a purge
    # deletes them whole (`foundry.purge.artifacts`).
    data_plots: tuple[str, ...] = ()
    # What a run logs under `data/` of a prepared folder: the files in which the data stage reports what it dropped
    # (per cleaning rule: counts and examples, never the PII itself), and those a data version is read by.
    audit_files: tuple[str, ...] = ()
    data_files: tuple[str, ...] = ()

    @property
    def plots_show_data(self) -> bool:
        """Whether runs trained or evaluated on its data log plots that show the data itself."""
        return bool(self.data_plots)

    @property
    def registration(self) -> Registration:
        """Its line in `REGISTERED`: its module, its data's modality and the dataset kinds its manifests carry."""
        return REGISTERED[self.name]

    def reads(self, manifest: DatasetManifest) -> bool:
        """Whether a dataset manifest describes this workload's data (a purge has the manifest, not a folder): its
        kind is one of those registered as this workload's."""
        return manifest.kind in self.registration.kinds

    @abstractmethod
    def file_holds(self, name: str, extensions: list[str], alone: bool) -> bool:
        """Whether a source file of this name holds this workload's data, by its type (`extensions`: the text types
        `data.extensions` reads; `alone`: the source names this file, not a folder that holds it). What a
        fine-tune's sources hold is known from their names before they are read."""

    @abstractmethod
    def acquire(self, config: FoundryConfig, out: Path) -> SourceManifest:
        """List and fingerprint the sources `config.data` names; the manifest, written to `out`, is the DVC
        dependency of `prepare`."""

    @abstractmethod
    def prepare(self, job: Preparing) -> Prepared:
        """The acquired sources made into a dataset in a fresh folder, on the job's basis (the parent data version's
        ledger, the share of its training documents replayed, the documents a purge removed). Its `progress` (bars)
        and `running` (a progress file, the map steps on Dask) only where it has them."""

    @abstractmethod
    def validate(self, job: Validating) -> ValidationReport:
        """The data gate over a prepared folder: writes the report, raises `ValidationFailed` on failure (leaving
        GX data docs in the job's `docs_dir`, if given); with its `parent`, the splits must be the ones its ledger
        gives."""

    @abstractmethod
    def shaping(self, config: FoundryConfig) -> dict[str, Any]:
        """The config's sections besides `data` that shape the prepared bytes: part of the dataset's cache key."""

    @abstractmethod
    def data_metrics(self, manifest: DatasetManifest) -> dict[str, float]:
        """The counts worth a chart in MLflow for a prepared dataset."""

    @abstractmethod
    def prepared_line(self, manifest: DatasetManifest) -> str:
        """What `foundry prepare` prints of what it made: the sizes of the splits."""

    @abstractmethod
    def data_stage(self, data_dir: Path) -> tuple[list[dict], str]:
        """What the data stage did, from a prepared folder's audit: the rows of the run page's table (what came in,
        what was kept, drops by reason) and the line the flow logs."""

    def home_ledgers(self, home: Path) -> tuple[HomeLedger, ...]:
        """The split ledgers it keeps in the home `home` outside its data versions (a purge renames the rows that
        name a purged document); none by default."""
        return ()

    @abstractmethod
    def purging(self) -> Purging:
        """The three functions that purge its data versions (the `purge_*` methods call them)."""

    def purge_matching(self, files: VersionFiles, criterion: Criterion) -> Matched:
        """The documents of a data version a purge's criterion names."""
        return self.purging().matching(files, criterion)

    def purge_locations(
        self, files: VersionFiles, criterion: Criterion, matched: Matched, shas: set[str], names: set[str]
    ) -> list[Location]:
        """Every file and position of a data version holding `matched`, or naming `shas` or `names`."""
        return self.purging().locations(files, criterion, matched, shas, names)

    def purge_rewrite(
        self, files: VersionFiles, hit: DataHit, gone: set[str], names: set[str], out: Path
    ) -> dict[str, int] | None:
        """The data version without the documents `gone`, written into the empty folder `out`: what was removed,
        by kind; None when a split would be left empty. `ValueError` (`Inconsistent`) when its files disagree."""
        return self.purging().rewrite(files, hit, gone, names, out)

    @abstractmethod
    def finetune_sections(self, config: FoundryConfig, parent: ParentModel) -> dict[str, Any]:
        """What a domain fine-tune of `parent` (this workload's registered version) keeps of such a base: whole
        sections (typed, or as values) in place of the warm start's (`FoundryConfig.warm_started_from`); `ValueError`
        for a `finetune` setting it cannot take."""

    @abstractmethod
    def log_served_model(self, run_id: str, checkpoint: Path, tokenizer: Path, config: FoundryConfig) -> str:
        """Log the pyfunc model that serves it (its leaf module in `foundry.serving`) under the run; its URI."""

    @abstractmethod
    def model_card(self, config: FoundryConfig, candidate: Candidate, decision: Decision, tags: VersionTags) -> str:
        """The registered version's description: what it is, what it was trained and judged on (`tags`: the
        version's own, its run, data and commit)."""

    @abstractmethod
    def event_scores(self, metrics: Any) -> dict[str, float]:
        """The holdout score a registered version's Prefect event carries, under its MLflow key."""

    # --- what it reads ----------------------------------------------------------------------------

    @abstractmethod
    def holds(self, data_dir: Path) -> bool:
        """Whether a prepared data folder is this workload's data."""

    @abstractmethod
    def data(self, data_dir: Path) -> Any:
        """The data folder's typed description (its manifest), as the other methods take it."""

    # --- training ---------------------------------------------------------------------------------

    @abstractmethod
    def module(self, config: Any, data: Any, settings: dict, on_gpu: bool) -> Any:
        """The LightningModule that trains on `data` (a `models.lit_base.LitBase`), with the trainer's `settings`
        (`models.lit_base.SETTINGS`); `on_gpu`: whether it will run on a GPU (a memory layout may depend on it)."""

    @abstractmethod
    def loaders(self, config: Any, data_dir: Path, data: Any, rank: int, world_size: int, replay: Any) -> tuple:
        """(train, validation) loaders of rank `rank` of `world_size`; `replay` (a `foundry.core.contracts.Replay` or
        None): pretraining data a run mixes in, for the workloads that replay it."""

    @abstractmethod
    def warm_start(self, parent: dict, module: Any, data: Any, config: Any) -> dict:
        """The state dict `module.model` starts from, made of a parent's `model.pt` (as loaded); a parent the
        module cannot start from is refused, naming what differs."""

    @abstractmethod
    def after_fit(self, module: Any) -> None:
        """What every rank does to the module after fitting, before its weights are gathered and digested."""

    @abstractmethod
    def saved_extra(self, config: Any, data: Any) -> dict:
        """What `model.pt` holds besides the weights, for the model's use (a chat template, labels)."""

    @abstractmethod
    def fsdp_units(self, module: Any) -> set[type]:
        """The block classes in `module` FSDP wraps one by one; empty for a model without blocks."""

    @abstractmethod
    def retrain_sections(self, config: FoundryConfig, recorded: dict) -> dict[str, Any]:
        """What the parent's recorded config (`recorded`) fixes of this workload's model and inputs in a retrain of
        it with `config`: whole sections in place of the warm start's (`FoundryConfig.warm_started_from`)."""

    # --- evaluation and gates ---------------------------------------------------------------------

    @abstractmethod
    def scoring(self) -> Any:
        """How `foundry evaluate` scores its registered models on a holdout, the baselines it sets beside them
        and how it reports them: a `foundry.evaluate.scoring.Scoring`."""

    def validate_model(self, config: Any, checkpoint: Path, data_dir: Path, run: Any) -> Any:
        """Stage E: a trained model's holdout metrics beside the baselines, logged on its run with what shows them
        (generations, plots); returns the metrics."""
        raise NotImplementedError(f"the {self.name} workload's models are not validated by stage E")

    def holdout_metrics(self, weights: Path, tokenizer: Path, data_dir: Path, config: Any) -> Any:
        """A trained model's metrics on the holdout of `data_dir` without the baselines stage E sets beside them
        (`weights`: its model.pt; `tokenizer`: its tokenizer.json): what a search trial records."""
        raise NotImplementedError(f"the {self.name} workload's models are not searched")

    def summary_table(self, metrics: Any, decision: Any) -> Any:
        """The table a pretraining or specialist gate's decision leaves on the candidate's run
        (`evaluation/summary.json`, a pandas DataFrame): its metrics beside what the gate compared them with."""
        raise NotImplementedError(f"the {self.name} workload's models go through no pretraining or specialist gate")

    def gate_compares(self) -> Any:
        """What its pretraining and specialist gates compare: a `foundry.gates.inputs.Compared`."""
        raise NotImplementedError(f"the {self.name} workload's models go through no pretraining or specialist gate")

    def gate_score(self, weights: Path, tokenizer: Path, data_dir: Path, config: Any) -> float:
        """A model's score on the holdout of `data_dir` by the gate's measure (`weights`: its model.pt;
        `tokenizer`: its tokenizer.json, where it has one)."""
        raise NotImplementedError(f"the {self.name} workload's models go through no pretraining or specialist gate")

    def recorded_score(self, version: Any, config: Any) -> float | None:
        """A registered version's recorded holdout score by the gate's measure, when it was scored as `config`
        scores; None: re-score it."""
        raise NotImplementedError(f"the {self.name} workload's models go through no pretraining or specialist gate")

    # --- export -----------------------------------------------------------------------------------

    # What `foundry export` writes its registered versions as: format -> (module, function), the function taking
    # (its `model.pt` as loaded, its tokenizer.json, the folder to write, source=its URI) and imported only when
    # asked for. None by default: `foundry.export.publish` refuses any format a workload does not list here.
    exports: Mapping[str, tuple[str, str]] = MappingProxyType({})


@cache
def named(name: str) -> Workload:
    """The registered workload `name`; a clear error naming the registered ones for any other."""
    if name not in REGISTERED:
        raise ValueError(f"no workload {name!r}: the registered ones are {', '.join(REGISTERED)}")
    return import_module(REGISTERED[name].module).WORKLOAD


def data_plots() -> frozenset[str]:
    """The plots, by file name, that show data in any registered workload's runs (a purge of a version whose
    workload it no longer knows, its data gone, looks for them all)."""
    return frozenset().union(*(named(name).data_plots for name in REGISTERED))


def for_data(data_dir: Path) -> Workload:
    """The workload whose data a prepared data folder holds. A folder without a manifest (nothing prepared, a
    wrong path) is a `FileNotFoundError` naming the manifest, an input error no retry mends, as reading it was."""
    for name in REGISTERED:
        if named(name).holds(Path(data_dir)):
            return named(name)
    manifest = Path(data_dir) / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(manifest))
    raise ValueError(f"{data_dir} holds no prepared data of any workload ({', '.join(REGISTERED)})")


def for_manifest(manifest: DatasetManifest) -> Workload:
    """The workload whose data a dataset manifest describes (a purge reads versions from caches, not folders)."""
    for name in REGISTERED:
        if named(name).reads(manifest):
            return named(name)
    raise ValueError(f"no workload reads a dataset of kind {manifest.kind!r} ({', '.join(REGISTERED)})")


def for_config(config: FoundryConfig) -> Workload:
    """The workload a run's config asks for, before any data exists: its `data.modality` (chat records are
    prepared by `foundry align`, from a text config)."""
    return named(config.data.modality)


def for_recorded(config: Mapping[str, Any]) -> Workload:
    """The workload of a registered version, named by the config it recorded
    (`foundry.registry.lineage.recorded_config`): its `data.modality`, as a retrain and a fine-tune read their
    parent's; text for a record from before the key (or none at all)."""
    return named((config.get("data") or {}).get("modality") or "text")
