"""Generation with a key/value cache over rows of different lengths: pure PyTorch, no paths.

The rows are left-padded to one width (the longest row), so every row's newest token sits in the last column
and one forward pass extends them all. Each row counts its positions from its own first token and never
attends to its padding, so a row computes what it computes alone. The prompt is computed once (prefill); each
step after that feeds only the newest token per row, its keys and values appended to the cache.

Past block_size tokens `GPT.generate` slides its window: the context is the last block_size tokens, positions
counted from the window's start, every layer recomputed over it. A cache cannot reproduce that (each cached key
was computed with the tokens that have since left the window in view), so once the widest row outgrows the
context every step recomputes each row's window; if the rows still running fit again (the long ones stopped),
the cache is rebuilt from them.
"""

from __future__ import annotations

import torch


class LayerCache:
    """One layer's keys and values (B, n_head, capacity, head_size), the first `length` columns filled."""

    def __init__(self, rows: int, n_head: int, capacity: int, head_size: int, like: torch.Tensor):
        shape = (rows, n_head, capacity, head_size)
        self.keys = like.new_zeros(shape)
        self.values = like.new_zeros(shape)
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new tokens' keys and values (B, nh, T, hs); returns all of them so far."""
        end = self.length + k.size(2)
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def keep(self, rows: torch.Tensor, drop_front: int) -> None:
        """Only `rows`, without the first `drop_front` columns (padding every kept row has)."""
        self.keys = _shifted(self.keys[rows], drop_front, self.length)
        self.values = _shifted(self.values[rows], drop_front, self.length)
        self.length -= drop_front


def _shifted(buffer: torch.Tensor, drop_front: int, length: int) -> torch.Tensor:
    """`buffer` (rows kept: a copy already) moved `drop_front` columns left, in place; the columns past the new
    length are never read before being written again, so they keep what they hold."""
    if drop_front:
        buffer[:, :, : length - drop_front] = buffer[:, :, drop_front:length].clone()
    return buffer


class KVCache:
    """Every layer's `LayerCache`, for `rows` rows of at most `capacity` tokens."""

    def __init__(self, model, rows: int, capacity: int):
        cfg = model.config
        like = model.wte.weight
        self.layers = [LayerCache(rows, cfg.n_head, capacity, cfg.n_embd // cfg.n_head, like) for _ in model.blocks]

    @property
    def length(self) -> int:
        return self.layers[0].length

    def keep(self, rows: torch.Tensor, drop_front: int) -> None:
        for layer in self.layers:
            layer.keep(rows, drop_front)

    def stacked(self, other: KVCache) -> None:
        """`other`'s rows below these, both full to their length: the shorter left-padded with zero columns (which
        the mask hides) so that every row's newest token stays in the last column."""
        length = max(self.length, other.length)
        for mine, theirs in zip(self.layers, other.layers, strict=True):
            mine.keys = _stacked(mine.keys, mine.length, theirs.keys, theirs.length, length)
            mine.values = _stacked(mine.values, mine.length, theirs.values, theirs.length, length)
            mine.length = length


def _stacked(top: torch.Tensor, top_length: int, bottom: torch.Tensor, bottom_length: int, length: int):
    out = top.new_zeros((top.size(0) + bottom.size(0), *top.shape[1:]))
    out[: top.size(0), :, length - top_length : length] = top[:, :, :top_length]
    out[top.size(0) :, :, length - bottom_length : length] = bottom[:, :, :bottom_length]
    return out


class Decoder:
    """The rows being generated: `next_logits` gives each active row's next-token logits, `push` appends the
    chosen tokens, `drop` stops rows (the others are unaffected). Rows are named by their index in `prompts`."""

    def __init__(self, model, prompts: list[list[int]]):
        if any(not p for p in prompts):
            raise ValueError("every prompt needs at least one token")
        self.model = model
        self.block_size = model.config.block_size
        self.device = model.wte.weight.device
        self.rows = [list(p) for p in prompts]
        self.active = list(range(len(prompts)))
        self.cache: KVCache | None = None

    @property
    def width(self) -> int:
        return max(len(self.rows[r]) for r in self.active)

    def next_logits(self) -> torch.Tensor:
        """(rows active, V) logits of each active row's next token, in the order of `active`."""
        if self.width > self.block_size:
            self.cache = None  # the window slides: recompute it (see the module's docstring)
            return self._window_logits()
        if self.cache is None:
            self.cache = KVCache(self.model, len(self.active), self.block_size)
        return self._cached_logits()

    def push(self, tokens: list[int]) -> None:
        """Append one token to each active row (in the order of `active`)."""
        for row, token in zip(self.active, tokens, strict=True):
            self.rows[row].append(int(token))

    def drop(self, rows: list[int]) -> None:
        """Stop generating `rows`; the cache keeps the others, without the columns only the dropped ones used."""
        gone = set(rows)
        if not gone:
            return
        kept = [i for i, r in enumerate(self.active) if r not in gone]
        before = self.width if self.active else 0
        self.active = [self.active[i] for i in kept]
        if self.cache is not None and self.active:
            self.cache.keep(torch.tensor(kept, device=self.device), before - self.width)
        elif not self.active:
            self.cache = None

    def join(self, other: Decoder) -> list[int]:
        """Take `other`'s active rows as rows of this decoder, after its own (continuous batching: requests that
        arrive while these rows generate join them). Both must stand where `next_logits` leaves a decoder, every
        token cached and the chosen ones not pushed yet; their caches are stacked (`KVCache.stacked`), or dropped
        to be rebuilt at the next step where either has none (a window past block_size). Returns the rows' names
        here, in `other.active`'s order."""
        names = list(range(len(self.rows), len(self.rows) + len(other.active)))
        self.rows.extend(other.rows[r] for r in other.active)
        if not self.active:
            self.cache = other.cache
        elif self.cache is not None and other.cache is not None:
            self.cache.stacked(other.cache)
        else:
            self.cache = None
        self.active.extend(names)
        return names

    def release(self, rows: list[int]) -> None:
        """Forget the tokens of `rows`, dropped already (a decoder that runs for hours would keep them all)."""
        for row in rows:
            self.rows[row] = []

    def _cached_logits(self) -> torch.Tensor:
        width, start = self.width, self.cache.length
        pads = torch.tensor([width - len(self.rows[r]) for r in self.active], device=self.device)
        # The columns not cached yet (the whole padded prompt first, then each row's newest token), each with the
        # token before it (for bigram tables): the last new + 1 columns of the row, left-padded with zeros.
        new = width - start
        tails = [([0] * (new + 1) + self.rows[r])[-(new + 1) :] for r in self.active]
        ids = torch.tensor([tail[1:] for tail in tails], device=self.device)
        previous = torch.tensor([tail[:-1] for tail in tails], device=self.device)
        columns = torch.arange(start, width, device=self.device)
        mask = None if width - start == 1 and not bool(pads.any()) else visible(pads, columns, width)
        pos = (columns[None, :] - pads[:, None]).clamp(min=0)
        return self.model.last_logits(ids, pos, mask, self.cache, previous)

    def _window_logits(self) -> torch.Tensor:
        windows = [self.rows[r][-self.block_size :] for r in self.active]
        width = max(len(w) for w in windows)
        pads = torch.tensor([width - len(w) for w in windows], device=self.device)
        ids = torch.tensor([[0] * (width - len(w)) + w for w in windows], device=self.device)
        columns = torch.arange(width, device=self.device)
        mask = visible(pads, columns, width) if bool(pads.any()) else None
        pos = (columns[None, :] - pads[:, None]).clamp(min=0)
        return self.model.last_logits(ids, pos, mask)


def visible(pads: torch.Tensor, columns: torch.Tensor, width: int) -> torch.Tensor:
    """(B, 1, T, width) attention mask of the tokens in `columns` (T of them) over all `width` columns, for rows
    left-padded by `pads` (B,): causal, never onto padding. A padding column sees itself, so that no row of
    the attention is empty (an empty one is NaN, which would spread through the padding's keys)."""
    keys = torch.arange(width, device=pads.device)
    causal = keys[None, :] <= columns[:, None]  # (T, width)
    real = keys[None, :] >= pads[:, None]  # (B, width)
    itself = keys[None, :] == columns[:, None]
    return ((causal[None] & real[:, None]) | itself[None])[:, None]
