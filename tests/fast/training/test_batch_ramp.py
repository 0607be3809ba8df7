"""The batch ramp (`train.batch_ramp_steps`, `train.batch_ramp_rows`): smaller batches over the first steps of text
pretraining from random weights, drawn from the same windows, resumable mid-ramp; warm starts and image runs
take whole batches."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from helpers_configs import tiny
from helpers_images import write_image_dataset
from lightning.pytorch import Callback

from foundry.config import FoundryConfig, as_recorded
from foundry.reports.cards import steps_line
from foundry.search.callbacks import TimeBox
from foundry.training.run import TrainingRun
from foundry.training.trainer import train
from foundry.vision.training import vision_loaders
from models.data import NO_RAMP, BatchRamp, RandomWindows, RankDraw, ramp_rows


def windows(ramp: BatchRamp = NO_RAMP, batch_size: int = 8, rank: int = 0, world_size: int = 1) -> RandomWindows:
    draw = RankDraw(seed=7, steps_per_epoch=5, rank=rank, world_size=world_size)
    return RandomWindows(np.arange(500, dtype=np.uint16), 8, batch_size, draw, ramp=ramp)


def test_rows_grow_linearly_to_the_batch_size_then_stay():
    assert [ramp_rows(step, 32, 4, 8) for step in range(6)] == [8, 14, 20, 26, 32, 32]
    assert [ramp_rows(step, 32, 0, 8) for step in range(3)] == [32, 32, 32]


def test_a_ramped_batch_is_the_first_rows_of_the_batch_drawn_without_it_across_epochs():
    unramped = windows()
    plain = [x for _ in range(2) for x, _ in unramped]
    ramp = windows(BatchRamp(steps=8, first_rows=2))
    ramped = [(x, y) for _ in range(2) for x, y in ramp]
    assert [len(x) for x, _ in ramped] == [2, 2, 3, 4, 5, 5, 6, 7, 8, 8]  # the second epoch counts on
    for (x, y), whole in zip(ramped, plain):
        assert torch.equal(x, whole[: len(x)]) and torch.equal(y, x + 1)


def test_the_ramp_counts_optimizer_steps_of_accumulated_micro_batches():
    ramp = windows(BatchRamp(steps=2, first_rows=4, grad_accum=2))
    assert [len(x) for x, _ in ramp] == [4, 4, 6, 6, 8]


def test_each_rank_takes_the_first_rows_of_its_own_slice():
    ramp = BatchRamp(steps=4, first_rows=1)
    whole = [x for x, _ in windows(batch_size=8)]  # one epoch: one sampler suffices
    for rank in (0, 1):
        ramped = [x for x, _ in windows(ramp, batch_size=4, rank=rank, world_size=2)]
        assert [len(x) for x in ramped] == [1, 1, 2, 3, 4]
        for x, full in zip(ramped, whole):
            assert torch.equal(x, full[4 * rank : 4 * rank + len(x)])


def test_a_resumed_ramp_draws_the_batches_the_interrupted_one_would_have():
    ramp = BatchRamp(steps=6, first_rows=2)
    whole = windows(ramp)
    uninterrupted = [x.tolist() for _ in range(2) for x, _ in whole]
    first = windows(ramp)
    batches = iter(first)
    seen = [next(batches)[0].tolist() for _ in range(3)]
    resumed = windows(ramp)
    resumed.load_state_dict(first.state_dict())
    assert seen + [x.tolist() for _ in range(2) for x, _ in resumed][: len(uninterrupted) - 3] == uninterrupted


def test_the_defaults_ramp_pretraining_from_random_weights_only():
    t = FoundryConfig().train
    assert (t.ramp_steps, t.batch_ramp_rows, t.batch_size, t.max_steps) == (400, 4, 16, 2000)
    assert t.model_copy(update={"init_from": "parent.pt"}).ramp_steps == 0  # fine-tunes, retrains, alignment
    small = tiny("train.batch_size=4", "train.batch_ramp_steps=10", "train.batch_ramp_rows=16").train
    assert small.ramp_steps == 0  # a first step already whole (once refused on load): no ramp
    assert tiny("train.batch_ramp_steps=10", "train.batch_ramp_rows=2").train.ramp_steps == 10


def test_the_model_card_says_how_the_batches_grew():
    t = FoundryConfig().train
    assert steps_line(t, 256) == (
        "2000 steps of 16 x 256 tokens (the first 400 growing from 4 rows), the weights the mean of the last 150 steps'"
    )
    assert steps_line(t.model_copy(update={"init_from": "parent.pt"}), 256) == "2000 steps of 16 x 256 tokens"


def test_a_config_recorded_before_the_ramp_trains_without_it():
    recorded = FoundryConfig().model_dump(mode="json")
    del recorded["train"]["batch_ramp_steps"]  # what a version registered before holds
    assert FoundryConfig.model_validate(as_recorded(recorded)).train.ramp_steps == 0
    assert "batch_ramp_steps" not in recorded["train"]  # the record itself is left as it was


def test_the_time_box_fits_a_ramped_run_by_its_rows():
    """A trainer's steps replayed by hand: each costs 1/256 s a row, so a 1 s box holds 256 rows, wherever the
    ramp's steps fall."""
    t = tiny("train.batch_ramp_steps=10", "train.batch_ramp_rows=2").train
    rows = [ramp_rows(step, t.batch_size, t.ramp_steps, t.batch_ramp_rows) for step in range(40)]
    assert rows[:11] == [2, 2, 3, 3, 4, 5, 5, 6, 6, 7, 8]
    now = [0.0]
    box = TimeBox.for_training(1.0, t)
    box.clock = lambda: now[0]
    loop = SimpleNamespace(max_steps=10**5)
    trainer = SimpleNamespace(
        global_step=0, max_steps=10**5, should_stop=False, fit_loop=SimpleNamespace(epoch_loop=loop)
    )
    module = SimpleNamespace(hparams=SimpleNamespace(max_steps=10**5))
    box.on_train_start(trainer, module)
    while box.fitted_steps is None:
        now[0] += rows[trainer.global_step] / 256
        trainer.global_step += 1
        box.on_train_batch_end(trainer, module, None, None, trainer.global_step - 1)
    assert trainer.global_step == 25  # calibrated over steps 5-24, as without a ramp
    assert box.fitted_steps == loop.max_steps == module.hparams.max_steps == 36
    assert sum(rows[:36]) <= 256 < sum(rows[:37])  # counted per step instead, the ramp's cheap steps would overfill it


def test_image_batches_take_the_whole_batch_under_a_ramp(tmp_path):
    config = tiny("train.batch_ramp_steps=10", "train.batch_ramp_rows=2")
    images, _ = next(iter(vision_loaders(config, write_image_dataset(tmp_path), 0, 1)[0]))
    assert len(images) == config.train.batch_size == 8


class BatchRows(Callback):
    """The rows of every micro-batch training sees, with the optimizer step it belongs to."""

    def __init__(self):
        self.rows: list[tuple[int, int]] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.rows.append((trainer.global_step, len(batch[0])))


def test_training_follows_the_ramp(tiny_dataset, tmp_path):
    seen = BatchRows()
    config = tiny(
        "train.max_steps=6", "train.batch_ramp_steps=4", "train.batch_ramp_rows=2", "train.grad_accum_steps=2"
    )
    model_pt = train(config, TrainingRun(tiny_dataset, tmp_path / "ckpt"), progress=False, callbacks=(seen,))
    assert seen.rows == [(step, rows) for step, rows in enumerate([2, 3, 5, 6, 8, 8]) for _ in range(2)]
    warm, seen_warm = config.model_copy(deep=True), BatchRows()
    warm.train.init_from = str(model_pt)
    train(warm, TrainingRun(tiny_dataset, tmp_path / "warm"), progress=False, callbacks=(seen_warm,))
    assert {rows for _, rows in seen_warm.rows} == {8}  # a warm start trains on whole batches


def test_a_compiled_model_takes_every_batch_of_the_ramp_in_one_graph():
    """Dynamo decides what is compiled again, from the guards it and AOTAutograd set: compiled with `aot_eager`,
    which traces as the trainer's Inductor does but runs the traced graph as it is. Inductor's code generation cost
    this test 20 s of the fast lane (a cold cache on 2 cores); tests/slow/training/test_train_processes.py trains
    compiled with Inductor."""
    import torch._dynamo

    from models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=512, block_size=8, n_layer=1, n_head=2, n_embd=16))
    model.compile(backend="aot_eager")
    torch._dynamo.reset()
    graphs = torch._dynamo.utils.counters["stats"]
    batches = iter(windows(BatchRamp(steps=4, first_rows=2)))
    with torch.no_grad():
        sizes = [model(*next(batches))[0].shape[0]]
        first = graphs["unique_graphs"]
        sizes += [model(x, y)[0].shape[0] for x, y in batches]
    assert sizes == [2, 3, 5, 6, 8]
    assert first >= 1 and graphs["unique_graphs"] == first  # no batch after the first compiled again
