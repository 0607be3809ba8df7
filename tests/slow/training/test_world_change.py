"""#56 point 3, a node lost for good: a training at 2 ranks loses one, and resumes on the other from its newest
checkpoint, with its global batch (2 micro-batches accumulated for the missing rank), each training window of the
schedule seen once, the run tagged with both world sizes. One rank's schedule, loader by loader:
tests/fast/models/test_world_schedule.py; the key and the counts: tests/fast/checkpointing/test_world_change.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from helpers_configs import tiny
from helpers_training import wait_for_checkpoint
from lightning.pytorch import Callback

from foundry.checkpointing.manifest import latest_valid
from foundry.checkpointing.resume import resume_key, resume_point
from foundry.pretrain.training import text_loaders
from foundry.training.launch import TRAIN_ENTRY, TrainingFailed, launch
from foundry.training.run import TrainingRun
from foundry.training.trainer import train

STEPS = 30
COMMON = (f"train.max_steps={STEPS}", "checkpoint.every_n_steps=5", "train.log_every_n_steps=5")  # batch_size 8


def rank_pid(rank: int) -> int:
    """The pid of training rank `rank` that this process's elastic agent started, from /proc."""
    for stat in os.scandir("/proc"):
        if not stat.name.isdigit():
            continue
        try:
            with open(f"/proc/{stat.name}/cmdline") as f:
                cmdline = f.read()
            with open(f"/proc/{stat.name}/environ") as f:
                env = dict(v.split("=", 1) for v in f.read().split("\0") if "=" in v)
            with open(f"/proc/{stat.name}/stat") as f:
                parent = f.read().rsplit(")", 1)[1].split()[1]
        except OSError:  # ended meanwhile
            continue
        if parent == str(os.getpid()) and TRAIN_ENTRY in cmdline and env.get("RANK") == str(rank):
            return int(stat.name)
    raise AssertionError(f"no rank {rank} running")


class Windows(Callback):
    """Every window a rank trains on, by the optimizer step it belongs to."""

    def __init__(self):
        self.by_step: dict[int, Counter] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        rows = Counter(bytes(row.numpy()) for row in batch[0])
        self.by_step.setdefault(trainer.global_step, Counter()).update(rows)


def scheduled(config, data, world: int, micro_batches: int) -> list[Counter]:
    """The windows the schedule gives each step, every rank's loader drawing `micro_batches` as `text_loaders` makes
    them (what each rank of the run draws)."""
    accum = config.train.grad_accum_steps
    steps = [Counter() for _ in range(micro_batches // accum)]
    for rank in range(world):
        loader, _ = text_loaders(config, data, rank, world)
        drawn = 0
        while drawn < micro_batches:
            for x, _ in loader:
                steps[drawn // accum].update(bytes(row.numpy()) for row in x)
                drawn += 1
                if drawn == micro_batches:
                    break
    return steps


def test_two_ranks_that_lose_one_resume_on_the_other_with_each_window_once(tiny_dataset, tmp_path):
    from mlflow import MlflowClient

    from foundry.runtime import tracking

    two, one = tiny(*COMMON, "train.devices=2"), tiny(*COMMON)
    assert resume_key(two, "v") == resume_key(one, "v")  # the pipeline finds the same attempt at either size
    folder = tmp_path / "ckpt"
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(launch, two, tiny_dataset, folder, None, "v")
        try:
            wait_for_checkpoint(folder, lambda: not future.done())
            os.kill(rank_pid(1), signal.SIGKILL)  # the node of rank 1, lost
            with pytest.raises(TrainingFailed):
                future.result(timeout=120)
        finally:
            for rank in (0, 1):
                try:
                    os.kill(rank_pid(rank), signal.SIGKILL)
                except AssertionError:
                    pass
    stopped = latest_valid(folder).step
    assert 0 < stopped < STEPS
    loader_state = torch.load(resume_point(folder), weights_only=True)["loops"]["fit_loop"]["state_dict"]
    assert loader_state["combined_loader"] == [{"epoch": 0, "batch_in_epoch": stopped, "world_size": 2}]

    run_id = tracking.start_pipeline_run(one)
    seen = Windows()
    run = TrainingRun(tiny_dataset, folder, run_id, "v", resume_point(folder))
    train(one, run, progress=False, callbacks=(seen,))
    assert latest_valid(folder).step == STEPS

    # Steps before the loss: what both ranks drew to the checkpoint; after it: what the one rank trained on.
    at_two = scheduled(two, tiny_dataset, 2, stopped)
    assert sorted(seen.by_step) == list(range(stopped, STEPS))
    trained = at_two + [seen.by_step[s] for s in range(stopped, STEPS)]
    reference = scheduled(tiny(*COMMON, "train.grad_accum_steps=2"), tiny_dataset, 1, STEPS * 2)
    assert trained == reference  # step by step, the windows of one rank throughout
    assert all(sum(step.values()) == 16 for step in trained)  # the global batch kept: 2 x 8 rows, then 1 x 2 x 8
    assert sum(trained, Counter()) == sum(reference, Counter())  # none twice, none skipped

    tags = MlflowClient().get_run(run_id).data.tags
    assert (tags["train.world_sizes"], tags["resumed_from_step"]) == ("2,1", str(stopped))
    assert torch.load(folder / "model.pt", weights_only=True)["config"]["train"]["grad_accum_steps"] == 2


def test_one_rank_goes_on_at_two_with_its_global_batch(tiny_dataset, tmp_path):
    """1 -> 2: one process accumulating 2 micro-batches is killed after a checkpoint; two ranks without accumulation
    resume it to the end, their loaders where the schedule's last step leaves them, tagged `1,2`."""
    from mlflow import MlflowClient

    from foundry.runtime import tracking
    from foundry.training.launch import worker_args

    one, two = tiny(*COMMON, "train.grad_accum_steps=2"), tiny(*COMMON, "train.devices=2")
    folder = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, *worker_args(one, tiny_dataset, folder, None, "v", None)])
    try:
        wait_for_checkpoint(folder, lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    stopped = latest_valid(folder).step
    assert 0 < stopped < STEPS

    run_id = tracking.start_pipeline_run(two)
    launch(two, tiny_dataset, folder, run_id, "v")
    final = torch.load(resume_point(folder), weights_only=True)
    assert final["global_step"] == STEPS
    # 30 steps of 16 windows: 30 micro-batches of 2 ranks x 8 into the epoch (450 micro-batches of 8 at 1 rank).
    position = final["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert position == [{"epoch": 0, "batch_in_epoch": STEPS, "world_size": 2}]
    tags = MlflowClient().get_run(run_id).data.tags
    assert (tags["train.world_sizes"], tags["resumed_from_step"]) == ("1,2", str(stopped))
