"""Builders that test modules of both lanes share (tests/fast/, tests/slow/). Fixtures live in conftest.py;
these are plain functions and values, so a test module imports them by name and no test module imports another."""

from __future__ import annotations

import io
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from conftest import REPO_ROOT

from foundry.checkpointing.manifest import read_manifest
from foundry.config import FoundryConfig, load_config
from foundry.training.trainer import weights_digest
from models.align_data import Conversations, Ragged

# --- configs and checkpoints --------------------------------------------------------------------------


def tiny(*overrides: str) -> FoundryConfig:
    """configs/tiny.yaml (the CPU twin) with `overrides`."""
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", list(overrides))


def digest(model_pt: Path) -> str:
    return weights_digest(torch.load(model_pt, weights_only=True)["state_dict"])


def wait_for_checkpoint(directory: Path, running: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not read_manifest(directory):
        assert running(), "training ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.02)


# --- search ---------------------------------------------------------------------------------------------

LR_ONLY = "search.space=[{key: train.learning_rate, distribution: log_uniform, low: 1.0e-7, high: 0.03}]"


def study_config(tmp_path: Path, *extra: str) -> FoundryConfig:
    """The tiny twin with a study journal of the test's own."""
    return tiny(f"search.storage={tmp_path / 'study.journal'}", "search.study_name=bookkeeping", *extra)


# --- sources --------------------------------------------------------------------------------------------

SHORT_BACKOFF = {"fetch_backoff_s": 0.01}  # the waits are the same code; the test need not sit through them


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def tar_gz(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# --- locks ----------------------------------------------------------------------------------------------


def holds_then_waits(first_home, second_home, name: str) -> list[str]:
    """Thread A takes the lock and holds it 2 s; thread B, started meanwhile, must get it only after."""
    from tasks.locks import promotion_lock

    order, taken = [], threading.Event()

    def first():
        with promotion_lock(name, first_home):
            taken.set()
            order.append("A in")
            time.sleep(2)
            order.append("A out")

    def second():
        taken.wait()
        with promotion_lock(name, second_home):
            order.append("B in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return order


# --- alignment samplers ---------------------------------------------------------------------------------


def many_conversations(n: int = 30) -> Conversations:
    rng = np.random.default_rng(0)
    tokens = [[30, *rng.integers(1, 29, size=int(rng.integers(2, 9))).tolist(), 33] for _ in range(n)]
    trained = [[0] * (len(t) // 2) + [1] * (len(t) - len(t) // 2) for t in tokens]
    return Conversations(Ragged.from_lists(tokens), Ragged.from_lists(trained))


def as_lists(batches) -> list:
    return [[t.tolist() for t in batch] for batch in batches]
