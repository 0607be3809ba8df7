"""Trained weights and checkpoints: a checkpoint's weights digest, and waiting for a training's first checkpoint."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from foundry.checkpointing.manifest import read_manifest
from foundry.training.trainer import weights_digest


def digest(model_pt: Path) -> str:
    return weights_digest(torch.load(model_pt, weights_only=True)["state_dict"])


def wait_for_checkpoint(directory: Path, running: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not read_manifest(directory):
        assert running(), "training ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.02)
