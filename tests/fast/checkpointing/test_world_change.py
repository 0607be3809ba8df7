"""foundry.checkpointing.world: a checkpoint of one world size resumed at another (#56 point 3), its global batch
kept by the accumulation, Lightning's micro-batch counts rescaled; the arithmetic check lets only that through."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import REPO_ROOT

from foundry.checkpointing.world import Schedule, WorldChangeRefused, at_world, rescale_loops, saved_schedule
from foundry.checkpointing.writer import ArithmeticMismatch, CheckpointEvery, ManifestCheckpointIO
from foundry.config import load_config


def tiny(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", list(overrides))  # batch_size 8


def test_a_fresh_start_keeps_its_config_and_names_its_world():
    config = tiny("train.devices=2", "train.grad_accum_steps=3")
    assert at_world(config, None) == (config, Schedule(48, (2,)))


def test_fewer_ranks_accumulate_more_to_keep_the_global_batch(caplog):
    with caplog.at_level(logging.WARNING):
        config, schedule = at_world(tiny("train.devices=1"), Schedule(32, (4, 2)))
    assert (config.train.grad_accum_steps, config.train.devices, schedule) == (4, 1, Schedule(32, (4, 2, 1)))
    assert "grad_accum_steps 1 -> 4 keeps its global batch of 32 rows" in caplog.text
    config, schedule = at_world(tiny("train.devices=2", "train.grad_accum_steps=4"), Schedule(32, (1, 2)))
    assert (config.train.grad_accum_steps, schedule.tag()) == (2, "1,2")  # the same world: the same accumulation


def test_a_global_batch_that_does_not_divide_across_the_new_world_is_refused():
    with pytest.raises(WorldChangeRefused, match="global batch of 8 rows .* does not divide across 2 ranks of 8 rows"):
        at_world(tiny("train.devices=2"), Schedule(8, (1,)))


def test_fsdp_is_not_resumed_at_another_world_size():
    fsdp = ("train.strategy=fsdp", "train.optimizer=adamw")
    with pytest.raises(WorldChangeRefused, match="2 FSDP ranks and this run has 1.* Resume at 2 ranks"):
        at_world(tiny(*fsdp), Schedule(16, (2,)))
    assert at_world(tiny(*fsdp, "train.devices=2"), Schedule(16, (2,)))[1] == Schedule(16, (2,))


def fit_loop(ready: int, completed: int) -> dict:
    counts = {"ready": ready, "completed": completed, "started": ready, "processed": ready}
    return {"loops": {"fit_loop": {"epoch_loop.batch_progress": {"total": counts, "current": dict(counts)}}}}


def test_lightning_counts_the_same_steps_in_the_new_worlds_micro_batches():
    checkpoint = fit_loop(20, 19)  # saved at a batch's end: one micro-batch not yet counted complete
    rescale_loops(checkpoint, 2, 1)
    progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert progress["total"] == progress["current"] == {"ready": 40, "completed": 39, "started": 40, "processed": 40}
    rescale_loops(checkpoint, 1, 2)
    assert progress["total"] == {"ready": 20, "completed": 19, "started": 20, "processed": 20}
    with pytest.raises(WorldChangeRefused, match="21 micro-batches .* at 1 ranks, no whole number .* at 2"):
        rescale_loops(fit_loop(21, 20), 1, 2)


def test_a_checkpoint_of_another_world_size_is_resumed_and_of_other_arithmetic_not(tmp_path, caplog):
    io = ManifestCheckpointIO(tmp_path, 1)
    two = {"threads": 1, "precision": "32-true", "device": "cpu", "world_size": 2}
    one = {**two, "threads": 2, "world_size": 1}
    written = CheckpointEvery(io, 10, two, Schedule(16, (2,))).state_dict()
    assert written["schedule"] == {"global_batch": 16, "world_sizes": [2]}
    with caplog.at_level(logging.WARNING):
        CheckpointEvery(io, 10, one, Schedule(16, (2, 1))).load_state_dict(written)
    assert "another world size, not bitwise" in caplog.text
    with pytest.raises(ArithmeticMismatch, match="'precision'"):
        CheckpointEvery(io, 10, {**one, "precision": "bf16-mixed"}).load_state_dict(written)


def test_the_schedule_is_read_from_a_checkpoint_and_guessed_for_one_written_before_it(tmp_path):
    io = ManifestCheckpointIO(tmp_path, 1)
    arithmetic = {"threads": 1, "world_size": 2}
    for name, schedule in (("new", Schedule(48, (1, 2))), ("old", None)):
        state = CheckpointEvery(io, 10, arithmetic, schedule).state_dict()
        torch.save({"callbacks": {"CheckpointEvery": state}}, tmp_path / f"{name}.ckpt")
    config = tiny("train.grad_accum_steps=3")
    assert saved_schedule(tmp_path / "new.ckpt", config) == Schedule(48, (1, 2))
    assert saved_schedule(tmp_path / "old.ckpt", config) == Schedule(8 * 2 * 3, (2,))  # the key held the accumulation
    torch.save({"callbacks": {}}, tmp_path / "older.ckpt")
    assert saved_schedule(tmp_path / "older.ckpt", config) is None
