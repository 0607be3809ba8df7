"""foundry/training/averaging.py: the saved weights are the mean of the last steps' (`train.average_last`; the run's
`train.averaged_steps` tag says how many), the checkpoints keep the optimizer's, and a run resumed inside the window
saves what an uninterrupted one does."""

from __future__ import annotations

import logging

import torch
from helpers_configs import tiny
from helpers_training import digest
from lightning.pytorch import Callback

from foundry.core.workload import named
from foundry.pretrain.training import vocabulary_only
from foundry.training.averaging import averaged_steps
from foundry.training.run import TrainingRun
from foundry.training.trainer import build_module, train

# 6 steps, the last 3 averaged; a checkpoint every step, all kept.
AVERAGED = ("train.max_steps=6", "train.average_last=0.5", "checkpoint.every_n_steps=1", "checkpoint.keep_last=6")


def weights(path) -> dict[str, torch.Tensor]:
    saved = torch.load(path, map_location="cpu", weights_only=False)
    return {k.removeprefix("model."): v for k, v in saved["state_dict"].items()}


class StopAt(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            trainer.should_stop = True


def test_the_saved_weights_are_the_mean_of_the_last_steps_and_the_checkpoints_the_optimizers(tiny_dataset, tmp_path):
    from mlflow import MlflowClient

    from foundry.core import run_tags
    from foundry.runtime import tracking

    config = tiny(*AVERAGED)
    assert config.train.averaged_steps == 3
    run_id = tracking.start_pipeline_run(config)
    saved = weights(train(config, TrainingRun(tiny_dataset, tmp_path, run_id=run_id), progress=False))
    assert MlflowClient().get_run(run_id).data.tags[run_tags.AVERAGED_STEPS] == "3"
    steps = [weights(tmp_path / f"step-{step:06d}.ckpt") for step in range(4, 7)]
    for name, tensor in saved.items():
        mean = sum(step[name] for step in steps) / 3
        torch.testing.assert_close(tensor, mean, rtol=0, atol=1e-6, msg=name)
    last = steps[-1]
    assert any(not torch.equal(saved[name], last[name]) for name in saved)  # the last checkpoint: the optimizer's


def test_a_run_resumed_inside_the_window_saves_the_weights_an_uninterrupted_one_does(tiny_dataset, tmp_path):
    config = tiny(*AVERAGED)
    whole = train(config, TrainingRun(tiny_dataset, tmp_path / "whole"), progress=False)
    # Stopped at step 5, two steps into the window, then resumed from that step's checkpoint.
    train(config, TrainingRun(tiny_dataset, tmp_path / "parts"), progress=False, callbacks=(StopAt(5),))
    resumed = TrainingRun(tiny_dataset, tmp_path / "parts", resume_from=tmp_path / "parts" / "step-000005.ckpt")
    assert digest(train(config, resumed, progress=False)) == digest(whole)


def test_without_averaging_the_saved_weights_are_the_last_steps(tiny_dataset, tmp_path):
    config = tiny("train.max_steps=4", "train.average_last=0", "checkpoint.every_n_steps=4")
    saved = weights(train(config, TrainingRun(tiny_dataset, tmp_path), progress=False))
    last = weights(tmp_path / "step-000004.ckpt")
    assert all(torch.equal(saved[name], last[name]) for name in saved)


def test_averaging_is_only_where_it_was_measured(tiny_dataset, tmp_path, caplog):
    """From random weights only; not for a model that does not take it (BatchNorm's statistics); not under FSDP,
    with a warning saying so."""
    asked = tiny("train.average_last=0.5", "train.max_steps=10")
    assert asked.train.averaged_steps == 5
    assert (
        tiny("train.average_last=0.5", "train.max_steps=10", f"train.init_from={tmp_path}/p.pt").train.averaged_steps
        == 0
    )
    text = named("text")
    module = build_module(asked, text, vocabulary_only(512))
    assert averaged_steps(asked.train, module) == 5
    fsdp = tiny("train.average_last=0.5", "train.max_steps=10", "train.strategy=fsdp", "train.optimizer=adamw")
    assert fsdp.train.averaged_steps == 0
    with caplog.at_level(logging.WARNING):
        assert averaged_steps(fsdp.train, module) == 0
    assert "FSDP gives each rank a shard" in caplog.text
    assert averaged_steps(asked.train, torch.nn.Linear(2, 2)) == 0
