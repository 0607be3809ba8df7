"""What preparing and validating a dataset take, as typed values: what the dataset builds on (it changes the
bytes) and how the preparation runs (it never does); one preparation (`Preparing`: the acquired sources, the config,
the folder, and those two) and one validation (`Validating`). The data stage, its Dask path and each workload's
`prepare` and `validate` pass them along whole."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from foundry.core.contracts import SourceManifest

# `foundry.config.FoundryConfig`: this core module must not import the config (it would reach up). Any to a checker.
FoundryConfig = Any

# `mapper(step, jobs, each=None)` runs `step` over a list of jobs and returns its results in order: in this process,
# on worker processes (`foundry.core.process_pool`) or on Dask's workers; `each(job, result)`, when given, is called
# here for every result as it comes back, in the jobs' order (progress).
Mapper = Callable[..., list]


@dataclass(frozen=True)
class DataBasis:
    """`parent`: the data version (folder) whose split ledger the dataset builds on (its documents keep their
    splits, new ones are de-duplicated against them); `replay_fraction` (retraining): the share of the parent's
    training documents the train split replays, drawn by content hash; `purged`: sha256 of documents a purge
    removed (`foundry.data.purged.purged_documents`), dropped as "purged" should a source still hold them."""

    parent: Path | None = None
    replay_fraction: float | None = None
    purged: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PrepareRun:
    """`mapper`: what runs the map steps (None: this process, one after another); `workers`: partitions per
    split, one per worker; `progress_file`: where preparation reports how far it is (`foundry.data.progress`)."""

    mapper: Mapper | None = None
    workers: int = 1
    progress_file: Path | None = None


FRESH = DataBasis()  # on no parent's ledger, nothing purged: a first dataset
IN_PROCESS = PrepareRun()  # the map steps here, no progress file


@dataclass(frozen=True)
class Preparing:
    """One preparation: the sources `acquire` listed (`source`) made into a dataset in a fresh `out_dir` as `config`
    says, on `basis`; `progress` (bars on a terminal) and `running` (a progress file, the map steps on Dask) only
    where the workload has them."""

    source: SourceManifest
    config: FoundryConfig
    out_dir: Path
    basis: DataBasis = FRESH
    progress: bool = False
    running: PrepareRun = IN_PROCESS


@dataclass(frozen=True)
class Validating:
    """One run of the data gate over the prepared folder `data_dir`: its report written to `report_path`, GX data
    docs left in `docs_dir` (if given) on a failure; with `parent` (the data version it was built on), the splits
    must be the ones its ledger gives."""

    data_dir: Path
    config: FoundryConfig
    report_path: Path
    docs_dir: Path | None = None
    parent: Path | None = None
