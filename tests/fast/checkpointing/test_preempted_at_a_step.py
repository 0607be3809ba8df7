"""foundry/checkpointing/writer.py `CheckpointEvery` under preemption: SIGTERM in the middle of a gradient
accumulation stops training at the end of that optimizer step, with its checkpoint, not at the next micro-batch as
Lightning's own handler would. The whole path (`foundry run`, two ranks, the bitwise resume):
tests/slow/training/test_preemption.py."""

from __future__ import annotations

import os
import signal

import pytest
from helpers_configs import tiny
from lightning.pytorch import Callback

from foundry.checkpointing.manifest import latest_valid
from foundry.runtime import preemption
from foundry.training.run import TrainingRun
from foundry.training.trainer import train


class SigtermAfter(Callback):
    """SIGTERM to this process at the end of micro-batch `batch`; the batches it then sees, recorded."""

    def __init__(self, batch: int):
        self.batch, self.seen = batch, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seen.append((batch_idx, trainer.global_step))
        if batch_idx == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_mid_accumulation_stops_after_that_step_with_its_checkpoint(tiny_dataset, tmp_path, monkeypatch):
    request = preemption._Request()
    # As `foundry run` arms it and `launch` trains: SIGTERM waits for the step; the grace's end far away.
    request.armed, request.training, request.grace_s = True, True, 3600
    monkeypatch.setattr(preemption, "_REQUEST", request)
    config = tiny("train.max_steps=12", "checkpoint.every_n_steps=5", "train.grad_accum_steps=2")
    # Two micro-batches a step: batch 5 ends step 3, batch 6 begins step 4, and batch 7 ends it.
    signalled = SigtermAfter(5)
    try:
        with pytest.raises(preemption.Preempted) as stopped:
            train(config, TrainingRun(tiny_dataset, tmp_path), progress=False, callbacks=(signalled,))
    finally:
        if request.timer is not None:  # the grace period's end would end pytest
            request.timer.cancel()
    # On past micro-batch 6 (Lightning's handler would have stopped there), to the end of step 4, where batch 7's
    # end, before this callback's turn, stopped it.
    assert signalled.seen[-2:] == [(5, 3), (6, 3)]
    assert (stopped.value.step, stopped.value.checkpoint) == (4, tmp_path / "step-000004.ckpt")
    assert latest_valid(tmp_path).step == 4 and not (tmp_path / "model.pt").exists()
    assert preemption.requested()
    assert signal.getsignal(signal.SIGTERM) is not preemption.on_sigterm  # Lightning put back the handler before
