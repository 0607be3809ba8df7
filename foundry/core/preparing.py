"""What preparing a dataset takes beside the acquired sources and the config, as two typed values: what the
dataset builds on (it changes the bytes), and how the preparation runs (it never does). The data stage, its Dask
path and each workload's `prepare` pass them along whole."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Runs a function over a list of jobs and returns its results in order: in this process, or on Dask's workers.
Mapper = Callable[[Callable, list], list]


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
