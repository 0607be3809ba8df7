"""Batches of next-token windows over a flat token array (a memmap in practice)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch


def _window_batch(tokens: np.ndarray, offsets: np.ndarray, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = np.stack([np.asarray(tokens[o : o + block_size + 1], dtype=np.int64) for o in offsets])
    batch = torch.from_numpy(rows)
    return batch[:, :-1], batch[:, 1:]


class RandomWindows:
    """Seeded random windows, `steps_per_epoch` batches an epoch, resumable mid-epoch.

    Every rank draws the same global batch of `world_size x batch_size` windows and takes its own
    slice, so N ranks see exactly the windows one process with N times the batch would see.
    Lightning stores `state_dict()` in the checkpoint's fit-loop state, so a resumed run draws
    exactly the batches the interrupted one would have drawn.
    """

    def __init__(
        self,
        tokens: np.ndarray,
        block_size: int,
        batch_size: int,
        seed: int,
        steps_per_epoch: int,
        rank: int = 0,
        world_size: int = 1,
    ):
        if len(tokens) < block_size + 1:
            raise ValueError(f"{len(tokens)} tokens is too few for windows of {block_size + 1}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside a world of {world_size}")
        self.tokens, self.block_size, self.batch_size = tokens, block_size, batch_size
        self.seed, self.rank, self.world_size, self.steps_per_epoch = seed, rank, world_size, steps_per_epoch
        self.epoch, self.batch_in_epoch = 0, 0

    def __len__(self) -> int:
        return self.steps_per_epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # The 0 (once the rank) keeps one process's stream what it always was.
        rng = np.random.default_rng([self.seed, 0, self.epoch])
        high = len(self.tokens) - self.block_size  # exclusive: the last window ends on the last token
        offsets = rng.integers(0, high, size=(self.steps_per_epoch, self.world_size * self.batch_size))
        offsets = offsets[:, self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        start = self.batch_in_epoch
        for i in range(start, self.steps_per_epoch):
            self.batch_in_epoch = i + 1
            yield _window_batch(self.tokens, offsets[i], self.block_size)
        self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.batch_in_epoch = int(state["epoch"]), int(state["batch_in_epoch"])


class SequentialWindows:
    """Non-overlapping windows from the start of the array, for evaluation."""

    def __init__(self, tokens: np.ndarray, block_size: int, batch_size: int, max_batches: int | None = None):
        if len(tokens) < block_size + 1:
            raise ValueError(f"{len(tokens)} tokens is too few for windows of {block_size + 1}")
        self.tokens, self.block_size, self.batch_size = tokens, block_size, batch_size
        n_windows = (len(tokens) - 1) // block_size
        n_batches = -(-n_windows // batch_size)
        self.n_batches = min(n_batches, max_batches) if max_batches else n_batches
        self.offsets = np.arange(n_windows) * block_size

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for b in range(self.n_batches):
            yield _window_batch(
                self.tokens, self.offsets[b * self.batch_size : (b + 1) * self.batch_size], self.block_size
            )
