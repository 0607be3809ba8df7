"""Where unfinished training lives, so that a re-run or a retry finds it, and what it resumes from.

Same model, training settings and data: the same training, so the same folder,
`$FOUNDRY_HOME/checkpoints/<key>/`, until it finishes and moves to its run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from foundry.checkpointing.manifest import latest_valid
from foundry.config import FoundryConfig
from foundry.core.contracts import Replay
from foundry.core.digests import sha256_file
from foundry.core.fs import remove_tree

log = logging.getLogger(__name__)

# Train settings that change how a run is operated, not the weights it computes: a re-run that
# differs only in these still resumes the same attempt.
OPERATIONAL_KEYS = {
    "retries",
    "max_restarts",
    "collective_timeout_s",
    "preempt_grace_s",
    "log_every_n_steps",
    "peak_flops",
    "launcher",
    "sbatch_args",
}
# Settings the key holds as what they resolve to on this machine (`arithmetic`): `cpu_threads: 0` is
# "the cores this process may use", `precision: auto` and `accelerator: auto` depend on the device.
RESOLVED_KEYS = {"cpu_threads", "precision", "accelerator"}
# How many ranks share the training: a run that lost a node resumes on the rest (`foundry.checkpointing.world`).
WORLD_KEYS = {"devices", "num_nodes"}
# Alignment settings outside `train` that change the weights a run computes on the same data.
ALIGN_LOSS_KEYS = {"beta", "sft_weight"}


def resume_point(directory: Path) -> Path | None:
    """The newest intact checkpoint in `directory`, or None: what every rank of a launch starts from."""
    last = latest_valid(directory)
    return directory / last.file if last else None


def resume_key(config: FoundryConfig, data_version: str, replay: Replay | None = None) -> str:
    """Same model, training settings, data (the replayed pretraining data too) and arithmetic: the same
    training, so the same checkpoints.

    The arithmetic (thread count, resolved precision, device, torch version, compile) is part of it: a re-run on
    another core count or device trains afresh in its own folder rather than resuming checkpoints whose
    continuation would no longer be bitwise what one run gives. The world size is not: a re-run on fewer ranks
    (a node lost) or more resumes the same training, with its global batch, at its own world size, bitwise only at
    the world size that wrote the checkpoint (`foundry.checkpointing.world`)."""
    from foundry.runtime.arithmetic import key_arithmetic

    dropped = OPERATIONAL_KEYS | RESOLVED_KEYS | WORLD_KEYS
    train = {k: v for k, v in config.train.model_dump(mode="json").items() if k not in dropped}
    if train["init_from"] and Path(train["init_from"]).is_file():
        # Retraining downloads its parent into a fresh folder each time: the weights name the start, not the path.
        train["init_from"] = sha256_file(Path(train["init_from"]))
    identity = {
        "model": config.model.model_dump(mode="json"),
        "train": train,
        "data_version": data_version,
        "arithmetic": key_arithmetic(config.train),
        "align": config.align.model_dump(include=ALIGN_LOSS_KEYS),  # DPO's loss: other weights, same data
    }
    if replay is not None:  # other batches, so other weights; without replay the key is what it always was
        identity["replay"] = {"data_version": replay.data.data_version, "fraction": config.align.replay_fraction}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def attempt_dir(home: Path, config: FoundryConfig, data_version: str, replay: Replay | None = None) -> Path:
    """Checkpoints of unfinished training live here until it finishes, across flow runs and retries."""
    return home / "checkpoints" / resume_key(config, data_version, replay)


@contextmanager
def claimed(attempt: Path) -> Iterator[None]:
    """One trainer per attempt folder; another run of the same config on the same data waits its turn, then
    resumes what the first left if it failed, or trains afresh if it finished (and moved the folder away).
    The kernel releases the lock when its holder dies, even by kill -9."""
    attempt.parent.mkdir(parents=True, exist_ok=True)
    with open(attempt.parent / f"{attempt.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another process is training into %s (same config and data): waiting for it", attempt)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def finish_attempt(attempt: Path, destination: Path) -> Path:
    """Move a finished attempt's folder to its run; the next identical run then starts afresh."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    if destination.exists():
        remove_tree(destination, within=destination.parent)
    os.replace(attempt, destination)
    return destination
