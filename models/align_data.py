"""Batches for alignment: conversations packed into rows, and preference pairs, both resumable mid-epoch.

A dataset stores each split as ragged arrays (one flat token array and the offsets where each record
starts). Conversations are packed whole, in a seeded order, into rows of `block_size` tokens; each row
carries segment ids, so `GPT.forward` keeps every conversation's attention and positions to itself.
Preference pairs become 2B rows, the B chosen responses then the B rejected ones, each after its prompt.
Like `RandomWindows`, every rank draws the same global batch and takes its slice, and Lightning stores
`state_dict()` in checkpoints, so a resumed run draws exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from models.align import IGNORE
from models.data import ResumableEpochs, check_rank


@dataclass(frozen=True)
class Ragged:
    """Records of varying length: record i is `values[offsets[i]:offsets[i + 1]]`."""

    values: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_lists(cls, records: list[list[int]], dtype=np.int32) -> Ragged:
        offsets = np.zeros(len(records) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(r) for r in records])
        values = np.fromiter((v for r in records for v in r), dtype=dtype, count=int(offsets[-1]))
        return cls(values, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclass(frozen=True)
class Conversations:
    tokens: Ragged
    trained: Ragged  # 1 where training predicts the token (assistant content and its end marker)


@dataclass(frozen=True)
class Pairs:
    prompt: Ragged  # the rendered prompt, ending with the assistant's marker
    chosen: Ragged  # each reply's tokens, ending with the end marker
    rejected: Ragged


def pack(order: np.ndarray, lengths: np.ndarray, block_size: int) -> list[list[int]]:
    """Records in `order`, whole, into rows of at most `block_size` tokens (next fit: a row closes when the
    next record does not fit)."""
    rows: list[list[int]] = []
    row: list[int] = []
    used = 0
    for i in order:
        if row and used + lengths[i] > block_size:
            rows.append(row)
            row, used = [], 0
        row.append(int(i))
        used += int(lengths[i])
    if row:
        rows.append(row)
    return rows


def packed_batch(data: Conversations, rows: list[list[int]], block_size: int, pad_id: int):
    """(x, y, segments), each (rows, block_size). A conversation's last token predicts nothing (the next
    one is another conversation); padding is a segment of its own and predicts nothing."""
    x = np.full((len(rows), block_size), pad_id, dtype=np.int64)
    y = np.full((len(rows), block_size), IGNORE, dtype=np.int64)
    segments = np.zeros((len(rows), block_size), dtype=np.int64)
    for r, row in enumerate(rows):
        at = 0
        for s, i in enumerate(row):
            tokens, trained = data.tokens[i], data.trained[i]
            n = len(tokens)
            x[r, at : at + n] = tokens
            y[r, at : at + n - 1] = np.where(trained[1:] == 1, tokens[1:], IGNORE)
            segments[r, at : at + n] = s
            at += n
        segments[r, at:] = len(row)
    return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(segments)


def pair_batch(data: Pairs, indices: list[int], pad_id: int):
    """(x, y) of 2B rows, right-padded to the longest: rows 0..B-1 prompt + chosen, B..2B-1 prompt + rejected;
    y counts only the reply's tokens."""
    sequences = [(data.prompt[i], data.chosen[i]) for i in indices] + [
        (data.prompt[i], data.rejected[i]) for i in indices
    ]
    width = max(len(p) + len(r) for p, r in sequences) - 1
    x = np.full((len(sequences), width), pad_id, dtype=np.int64)
    y = np.full((len(sequences), width), IGNORE, dtype=np.int64)
    for row, (prompt, reply) in enumerate(sequences):
        whole = np.concatenate([prompt, reply]).astype(np.int64)
        x[row, : len(whole) - 1] = whole[:-1]
        y[row, len(prompt) - 1 : len(whole) - 1] = reply
    return torch.from_numpy(x), torch.from_numpy(y)


class _Resumable(ResumableEpochs):
    """A seeded epoch of `steps_per_epoch` global batches, resumable mid-epoch (see `RandomWindows`)."""

    def __init__(self, batch_size: int, seed: int, steps_per_epoch: int, rank: int, world_size: int):
        check_rank(rank, world_size)
        self.batch_size, self.seed, self.steps_per_epoch = batch_size, seed, steps_per_epoch
        self.rank, self.world_size = rank, world_size

    def _units(self, rng_for) -> list:
        """The epoch's global list of units (rows or pairs), at least steps_per_epoch x world x batch long."""
        raise NotImplementedError

    def _batch(self, units: list):
        raise NotImplementedError

    def __iter__(self):
        units = self._units(lambda k: np.random.default_rng([self.seed, 0, self.epoch, k]))
        per_step = self.world_size * self.batch_size
        for i in range(self.batch_in_epoch, self.steps_per_epoch):
            self.batch_in_epoch = i + 1
            step = units[i * per_step : (i + 1) * per_step]
            yield self._batch(step[self.rank * self.batch_size : (self.rank + 1) * self.batch_size])
        self.epoch, self.batch_in_epoch = self.epoch + 1, 0


class PackedConversations(_Resumable):
    """Training batches of `batch_size` packed rows (x, y, segments). An epoch packs every conversation once
    in a fresh order; as many steps as the tokens fill rows, so a few rows at its end may wait for the next."""

    def __init__(
        self, data: Conversations, block_size: int, batch_size: int, seed: int, pad_id: int, rank=0, world_size=1
    ):
        lengths = data.tokens.lengths()
        if len(lengths) == 0 or lengths.max() > block_size:
            raise ValueError(f"conversations must be 1 to {block_size} tokens; got {len(lengths)} records")
        full_rows = math.ceil(int(lengths.sum()) / block_size)  # packing never needs fewer rows than this
        super().__init__(batch_size, seed, max(1, full_rows // (batch_size * world_size)), rank, world_size)
        self.data, self.block_size, self.pad_id, self.lengths = data, block_size, pad_id, lengths

    def _units(self, rng_for) -> list:
        rows: list[list[int]] = []
        k = 0
        while len(rows) < self.steps_per_epoch * self.world_size * self.batch_size:  # tiny data: more passes
            rows += pack(rng_for(k).permutation(len(self.lengths)), self.lengths, self.block_size)
            k += 1
        return rows

    def _batch(self, rows: list):
        return packed_batch(self.data, rows, self.block_size, self.pad_id)


class WithReplay:
    """Each batch of packed conversations followed by a batch of pretraining windows (`RandomWindows`), each
    window one segment whose every next token is trained: replay against forgetting. Both streams resume
    where they were; the windows run on through epochs of the conversations."""

    key = "conversations"  # the batches' name in `state_dict()`, as checkpoints have always stored it

    def __init__(self, batches: _Resumable, windows):
        self.batches, self.windows = batches, windows

    def __len__(self) -> int:
        return len(self.batches)

    def _join(self, batch: tuple, window: tuple) -> tuple:
        x, y, segments = batch
        wx, wy = window
        return torch.cat([x, wx]), torch.cat([y, wy]), torch.cat([segments, torch.zeros_like(wx)])

    def __iter__(self):
        windows = iter(self.windows)
        for batch in self.batches:
            try:
                window = next(windows)
            except StopIteration:  # the windows' epoch ended: the next one
                windows = iter(self.windows)
                window = next(windows)
            yield self._join(batch, window)

    def state_dict(self) -> dict:
        return {self.key: self.batches.state_dict(), "windows": self.windows.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.batches.load_state_dict(state[self.key])
        self.windows.load_state_dict(state["windows"])


class PairsWithReplay(WithReplay):
    """Each batch of preference pairs (x, y) with a batch of pretraining windows beside it, as (x, y, wx, wy):
    kept apart, since pair rows are as wide as their longest reply and only they go through the reference."""

    key = "pairs"

    def _join(self, batch: tuple, window: tuple) -> tuple:
        return (*batch, *window)


class PreferenceBatches(_Resumable):
    """Training batches of `batch_size` pairs as 2B rows (x, y); each epoch visits the pairs in a fresh order."""

    def __init__(self, data: Pairs, batch_size: int, seed: int, pad_id: int, rank=0, world_size=1):
        if len(data.prompt) == 0:
            raise ValueError("no preference pairs")
        super().__init__(batch_size, seed, max(1, len(data.prompt) // (batch_size * world_size)), rank, world_size)
        self.data, self.pad_id = data, pad_id

    def _units(self, rng_for) -> list:
        order: list[int] = []
        k = 0
        while len(order) < self.steps_per_epoch * self.world_size * self.batch_size:
            order += rng_for(k).permutation(len(self.data.prompt)).tolist()
            k += 1
        return order

    def _batch(self, indices: list):
        return pair_batch(self.data, indices, self.pad_id)


def sequential_conversations(
    data: Conversations, block_size: int, batch_size: int, pad_id: int, max_batches: int | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Every conversation once, in order, packed: for evaluation."""
    rows = pack(np.arange(len(data.tokens)), data.tokens.lengths(), block_size)
    batches = range(0, len(rows), batch_size)
    for n, start in enumerate(batches):
        if max_batches is not None and n >= max_batches:
            return
        yield packed_batch(data, rows[start : start + batch_size], block_size, pad_id)


def sequential_pairs(
    data: Pairs, batch_size: int, pad_id: int, max_batches: int | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Every pair once, in order: for evaluation."""
    for n, start in enumerate(range(0, len(data.prompt), batch_size)):
        if max_batches is not None and n >= max_batches:
            return
        yield pair_batch(data, list(range(start, min(start + batch_size, len(data.prompt)))), pad_id)


class Sized:
    """An evaluation iterable Lightning can size (it prefetches nothing from a sized loader)."""

    def __init__(self, make, length: int):
        self.make, self.length = make, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        return iter(self.make())
