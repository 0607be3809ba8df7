"""Batches of next-token windows over a flat token array (a memmap in practice)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch


def _window_batch(tokens: np.ndarray, offsets: np.ndarray, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = np.stack([np.asarray(tokens[o : o + block_size + 1], dtype=np.int64) for o in offsets])
    batch = torch.from_numpy(rows)
    return batch[:, :-1], batch[:, 1:]


def ramp_rows(step: int, batch_size: int, ramp_steps: int, first_rows: int) -> int:
    """Rows of a batch at optimizer `step` of a linear batch ramp: `first_rows` at step 0, `batch_size` from
    `ramp_steps` on (and throughout when `ramp_steps` is 0)."""
    if step >= ramp_steps:
        return batch_size
    return first_rows + (batch_size - first_rows) * step // ramp_steps


class BatchRamp(NamedTuple):
    """A linear batch ramp over optimizer steps (`ramp_rows`); a loader counts micro-batches, `grad_accum` a step."""

    steps: int = 0
    first_rows: int = 0
    grad_accum: int = 1


NO_RAMP = BatchRamp()


def epoch_batches(n_tokens: int, block_size: int, global_rows: int, grad_accum: int) -> int:
    """Micro-batches of one rank in an epoch of windows: as many whole optimizer steps of `global_rows` windows
    (every rank's micro-batches of a step together) as `n_tokens` hold, at least one, each `grad_accum`
    micro-batches. An epoch then holds the same windows whatever the world size that shares its global batch."""
    return max(1, n_tokens // (global_rows * block_size)) * grad_accum


def check_rank(rank: int, world_size: int) -> None:
    """A loader of rank `rank` refuses a rank that is not in its world of `world_size`."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size}")


@dataclass(frozen=True)
class RankDraw:
    """Where one rank's batches come from: the `seed` of every epoch's draw, `steps_per_epoch` batches an epoch,
    and this rank's slice (`rank` of `world_size`) of each global batch."""

    seed: int
    steps_per_epoch: int
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        check_rank(self.rank, self.world_size)


class ResumableEpochs:
    """Where a training loader stands: `batch_in_epoch` batches drawn of epoch `epoch`, `steps_per_epoch` an epoch.
    Lightning stores `state_dict()` in the checkpoint's fit-loop state, so a resumed run draws exactly the batches
    the interrupted one would have drawn: text windows, chat rows and images alike."""

    steps_per_epoch: int
    epoch: int = 0
    batch_in_epoch: int = 0

    def __len__(self) -> int:
        return self.steps_per_epoch

    world_size: int = 1

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch, "world_size": self.world_size}

    def load_state_dict(self, state: dict) -> None:
        saved_world = int(state.get("world_size", self.world_size))  # a state written before it was saved: ours
        self.epoch = int(state["epoch"])
        self.batch_in_epoch = self._batches_at(int(state["batch_in_epoch"]), saved_world)

    def _batches_at(self, batches: int, saved_world: int) -> int:
        """This rank's batches into the epoch where `batches` of a world of `saved_world` ranks stood. A loader
        whose epochs depend on the world size resumes only in a world of its checkpoint's size."""
        if saved_world != self.world_size:
            raise ValueError(
                f"{type(self).__name__} was saved by a world of {saved_world} ranks, and its batches depend on the "
                f"world size: resume it at {saved_world} ranks (train.devices x train.num_nodes), not "
                f"{self.world_size}"
            )
        return batches


class RandomWindows(ResumableEpochs):
    """Seeded random windows, `steps_per_epoch` batches an epoch, resumable mid-epoch.

    Every rank draws the same global batch of `world_size x batch_size` windows and takes its own
    slice, so N ranks see exactly the windows one process with N times the batch would see.
    Lightning stores `state_dict()` in the checkpoint's fit-loop state, so a resumed run draws
    exactly the batches the interrupted one would have drawn. With a `ramp`, a batch is the first
    `ramp_rows` rows of the one drawn without it, so the windows drawn stay the same.

    The schedule does not depend on the world size: an epoch's windows are one seeded stream, and optimizer step
    k takes its `global_rows` windows (`batch_size x world_size x grad_accum`) from k x global_rows on, in
    slices of `batch_size`: micro-batch j of rank r takes slice j x world_size + r. With the same `batch_size`
    and global batch (`epoch_batches`), the windows of every step are the same whatever the world size, and a
    run saved at one world size resumes at another (`load_state_dict`) without a window seen twice or skipped.
    """

    def __init__(
        self,
        tokens: np.ndarray,
        block_size: int,
        batch_size: int,
        draw: RankDraw,
        ramp: BatchRamp = NO_RAMP,
    ):
        if len(tokens) < block_size + 1:
            raise ValueError(f"{len(tokens)} tokens is too few for windows of {block_size + 1}")
        self.tokens, self.block_size, self.batch_size = tokens, block_size, batch_size
        self.seed, self.rank, self.world_size = draw.seed, draw.rank, draw.world_size
        self.steps_per_epoch = draw.steps_per_epoch
        self.ramp = ramp

    def epoch_offsets(self, epoch: int) -> np.ndarray:
        """This rank's window offsets of `epoch`, a row per micro-batch (before the ramp takes its first rows)."""
        # The 0 (once the rank) keeps one process's stream what it always was. The stream is drawn in order, so
        # its first n values are the same whatever shape asks for them: the world size changes only the slicing.
        rng = np.random.default_rng([self.seed, 0, epoch])
        high = len(self.tokens) - self.block_size  # exclusive: the last window ends on the last token
        offsets = rng.integers(0, high, size=(self.steps_per_epoch, self.world_size * self.batch_size))
        return offsets[:, self.rank * self.batch_size : (self.rank + 1) * self.batch_size]

    def batch_offsets(self, offsets: np.ndarray, i: int) -> np.ndarray:
        """The offsets micro-batch `i` of the current epoch trains on, of its epoch's `offsets`."""
        return offsets[i][: self._rows(self.epoch * self.steps_per_epoch + i)]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        offsets = self.epoch_offsets(self.epoch)
        start = self.batch_in_epoch
        for i in range(start, self.steps_per_epoch):
            self.batch_in_epoch = i + 1
            batch = _window_batch(self.tokens, self.batch_offsets(offsets, i), self.block_size)
            rows = len(batch[0])
            if rows < self.batch_size:
                # One compiled graph for every batch size of the ramp, rather than a compilation for its second.
                for tensor in batch:
                    torch._dynamo.maybe_mark_dynamic(tensor, 0)
            yield batch
        self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    def _batches_at(self, batches: int, saved_world: int) -> int:
        # The same windows into the epoch, in this world's micro-batches of world_size x batch_size windows.
        windows = batches * saved_world * self.batch_size
        if windows % (self.world_size * self.batch_size):
            raise ValueError(
                f"a world of {saved_world} ranks stopped {windows} windows into its epoch, which is no whole number "
                f"of micro-batches of {self.world_size} ranks x {self.batch_size} rows: resume from a checkpoint of "
                "an optimizer step (every checkpoint is one) with the same global batch"
            )
        return windows // (self.world_size * self.batch_size)

    def _rows(self, micro_batch: int) -> int:
        steps, first_rows, grad_accum = self.ramp
        return ramp_rows(micro_batch // grad_accum, self.batch_size, steps, first_rows)


class SequentialWindows:
    """Windows from the start of the array, for evaluation, each `stride` tokens after the last (non-overlapping
    by default). Every next token is a target once: where windows overlap, the targets an earlier window scored
    are -100 (masked), so the rest are scored with at least `block_size - stride` tokens before them."""

    def __init__(
        self,
        tokens: np.ndarray,
        block_size: int,
        batch_size: int,
        max_batches: int | None = None,
        stride: int | None = None,
    ):
        if len(tokens) < block_size + 1:
            raise ValueError(f"{len(tokens)} tokens is too few for windows of {block_size + 1}")
        stride = block_size if stride is None else stride
        if not 1 <= stride <= block_size:
            raise ValueError(f"stride {stride} is outside 1..{block_size}, the window")
        self.tokens, self.block_size, self.batch_size, self.stride = tokens, block_size, batch_size, stride
        n_windows = (len(tokens) - 1 - block_size) // stride + 1
        n_batches = -(-n_windows // batch_size)
        self.n_batches = min(n_batches, max_batches) if max_batches else n_batches
        self.offsets = np.arange(n_windows) * stride

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for b in range(self.n_batches):
            offsets = self.offsets[b * self.batch_size : (b + 1) * self.batch_size]
            x, y = _window_batch(self.tokens, offsets, self.block_size)
            if self.stride < self.block_size:
                y = y.clone()
                y[offsets > 0, : self.block_size - self.stride] = -100  # scored by the window before
            yield x, y

    def end(self) -> int:
        """How many tokens from the start the windows cover: the targets after it are left unscored."""
        return int(self.offsets[: self.n_batches * self.batch_size][-1]) + self.block_size + 1
