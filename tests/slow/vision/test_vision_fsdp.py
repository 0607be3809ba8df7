"""The image classifier (a CNN with BatchNorm) under FSDP on two CPU ranks (gloo), started by the launcher the
pipeline uses: sharded, its kernels and matrices decayed, checkpointed, and resumed bitwise exactly. One process:
tests/fast/vision/test_vision_train.py; DDP on two ranks: tests/conftest.py `vision_run`; text under FSDP:
bench/gpu_fsdp_smoke.py on a GPU."""

from __future__ import annotations

import shutil

import torch
from conftest import REPO_ROOT
from helpers_images import write_image_dataset
from helpers_training import digest

from foundry.checkpointing.manifest import latest_valid, read_manifest
from foundry.config import load_config
from foundry.training.launch import launch

# 36 8x8 training images over 2 ranks, 8 a batch each: 2 batches an epoch, so the resume at step 3 starts in the
# middle of one (the loader's position, the shuffle and the augmentation streams must all come back). Validation
# only where compared, at step 6, on BatchNorm's statistics. A launch costs ~15 s, ~11 of them the ranks' imports.
SETTINGS = [
    "train.devices=2",
    "train.strategy=fsdp",
    "train.max_steps=6",
    "train.batch_size=8",
    "train.learning_rate=0.01",
    "train.warmup_steps=0",
    "train.log_every_n_steps=3",
    "train.val_every_n_steps=6",
    "train.val_batches=1",
    "checkpoint.every_n_steps=3",
]


def test_fsdp_on_two_cpu_ranks_checkpoints_and_a_resume_gives_the_uninterrupted_weights_and_validation(tmp_path):
    data = write_image_dataset(tmp_path / "images", size=8)
    config = load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", SETTINGS)
    first = tmp_path / "uninterrupted"
    launch(config, data, first, None, "v-img")
    resumed = shutil.copytree(first, tmp_path / "resumed")
    newest = resumed / "step-000006.ckpt"
    with open(newest, "r+b") as f:  # a write cut short: the copy resumes from step 3
        f.truncate(newest.stat().st_size // 2)
    (resumed / "model.pt").unlink()
    assert latest_valid(resumed).step == 3
    launch(config, data, resumed, None, "v-img")

    # Sharded: FSDP gathers the full weights on rank 0 alone (under DDP every rank leaves a digest of its own).
    assert [p.name for p in first.glob("weights.rank*.sha256")] == ["weights.rank0.sha256"]
    assert digest(resumed / "model.pt") == digest(first / "model.pt")
    # Validation averages both ranks: equal only if rank 1's BatchNorm statistics are rank 0's in both runs.
    losses = [{e.step: e.val_loss for e in read_manifest(d)} for d in (first, resumed)]
    assert losses[0][6] == losses[1][6] and losses[0][6] is not None, losses
    # Weight decay found its parameters though FSDP had flattened them (tests/fast/models/test_decay.py): the decayed
    # group holds each kernel and matrix, as many as the checkpoint's tensors of two or more dimensions.
    saved = torch.load(first / "step-000003.ckpt", weights_only=True)
    matrices = [name for name, tensor in saved["state_dict"].items() if tensor.dim() >= 2]
    groups = saved["optimizer_states"][0]["param_groups"]
    assert [len(g["params"]) for g in groups if g["weight_decay"] > 0] == [len(matrices)] == [3], groups
