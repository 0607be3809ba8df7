"""#56 point 3: the training windows of each optimizer step do not depend on the world size, so a run that loses a
rank resumes on the rest without a window seen twice or skipped; one process's windows stay what they were."""

from __future__ import annotations

import numpy as np
import pytest

from models.data import NO_RAMP, BatchRamp, RandomWindows, RankDraw, ResumableEpochs, epoch_batches, ramp_rows

BLOCK, ROWS = 4, 3  # a window's tokens, a micro-batch's rows
TOKENS = np.arange(200)  # a window's first token is its offset: what the test counts


def loader(world: int, rank: int, accum: int, global_rows: int, ramp_steps: int = 0) -> RandomWindows:
    spe = epoch_batches(len(TOKENS), BLOCK, global_rows, accum)
    ramp = BatchRamp(ramp_steps, 1, accum) if ramp_steps else NO_RAMP
    return RandomWindows(TOKENS, BLOCK, ROWS, RankDraw(7, spe, rank, world), ramp)


def take(windows: RandomWindows, n: int) -> list[list[int]]:
    """The offsets of the next `n` micro-batches, across epochs, as Lightning draws them (a fresh `iter` each epoch)."""
    out: list[list[int]] = []
    while len(out) < n:
        for x, _ in windows:
            out.append(x[:, 0].tolist())
            if len(out) == n:
                break
    return out


def steps(world: int, accum: int, n_steps: int, ranks: list[RandomWindows]) -> list[list[int]]:
    """Each optimizer step's windows (sorted), every rank's micro-batches of the step together."""
    per_rank = [take(r, n_steps * accum) for r in ranks]
    return [sorted(w for r in per_rank for mb in r[s * accum : (s + 1) * accum] for w in mb) for s in range(n_steps)]


@pytest.mark.parametrize("ramp_steps", [0, 5])
@pytest.mark.parametrize(("first", "then"), [((2, 1), (1, 2)), ((1, 2), (2, 1))])
def test_a_run_that_changes_world_size_sees_each_window_of_the_schedule_once(first, then, ramp_steps):
    """2 ranks (no accumulation) for 4 steps, then 1 rank accumulating 2 micro-batches to step 11 (and 1 -> 2): the
    same windows, step by step, as one rank throughout; 200 tokens hold 8 steps of 6 windows of 4: an epoch ends
    at step 8, after the change."""
    global_rows, total, switch = ROWS * 2, 11, 4
    reference = steps(1, 2, total, [loader(1, 0, 2, global_rows, ramp_steps)])

    world, accum = first
    before = [loader(world, r, accum, global_rows, ramp_steps) for r in range(world)]
    seen = steps(world, accum, switch, before)
    state = before[0].state_dict()
    assert all(b.state_dict() == state for b in before)  # every rank stands at the same place
    world, accum = then
    after = [loader(world, r, accum, global_rows, ramp_steps) for r in range(world)]
    for windows in after:
        windows.load_state_dict(state)
    seen += steps(world, accum, total - switch, after)

    assert seen == reference
    rows = [ramp_rows(s, ROWS, ramp_steps, 1) if ramp_steps else ROWS for s in range(total)]
    assert [len(s) for s in seen] == [r * 2 for r in rows]  # every row of the schedule counted: none skipped
    assert len(reference[0]) < len(reference[-1]) if ramp_steps else True


def test_one_process_draws_what_it_always_drew():
    """The default run (one process, no accumulation): the windows of the code before #56 point 3, pinned as it
    drew them (each epoch `steps x batch` offsets of one seeded stream, `steps` = tokens // (batch x block))."""
    windows = loader(1, 0, 1, ROWS, ramp_steps=5)
    spe = max(1, len(TOKENS) // (ROWS * BLOCK))
    assert windows.steps_per_epoch == spe
    drawn = take(windows, 2 * spe + 3)
    high = len(TOKENS) - BLOCK
    before = [np.random.default_rng([7, 0, e]).integers(0, high, size=(spe, ROWS)) for e in range(3)]
    expected = [row[: ramp_rows(i, ROWS, 5, 1)].tolist() for i, row in enumerate(np.concatenate(before)[: 2 * spe + 3])]
    assert drawn == expected


def test_a_position_no_whole_micro_batch_of_the_new_world_holds_is_refused():
    state = loader(2, 0, 1, ROWS * 2).state_dict() | {"batch_in_epoch": 1}  # 6 windows into the epoch
    four = loader(4, 0, 1, ROWS * 4)
    with pytest.raises(ValueError, match="6 windows into its epoch, which is no whole number of micro-batches of 4"):
        four.load_state_dict(state)


def test_a_loader_whose_epochs_follow_the_world_size_resumes_in_its_own_world_only():
    class Fixed(ResumableEpochs):
        def __init__(self, world_size: int):
            self.steps_per_epoch, self.world_size = 5, world_size

    saved = Fixed(2).state_dict() | {"batch_in_epoch": 3}
    same = Fixed(2)
    same.load_state_dict(saved)
    assert same.batch_in_epoch == 3
    Fixed(1).load_state_dict({"epoch": 0, "batch_in_epoch": 3})  # written before the world size was saved
    with pytest.raises(ValueError, match="Fixed was saved by a world of 2 ranks.* resume it at 2 ranks"):
        Fixed(1).load_state_dict(saved)
