"""Cutting purged documents out of a data version's arrays: a split's flat tokens and alignment records' ragged
arrays. Pure array work for `purge_rewrite`; every cut is checked against what the arrays must hold."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

COPY_TOKENS = 1 << 22  # tokens per write while cutting a shard


class Inconsistent(ValueError):
    """The version's files do not agree with one another: it is not rewritten (a purge does not guess)."""


def spans(
    parts: list[np.ndarray], eot: int, documents: int, lengths: Callable[[], list[int]]
) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of a split's `documents` in its tokens (`parts`, its shards in order), end-of-text excluded.

    The n-th document is the n-th run of tokens before an end-of-text; when the split holds more end-of-text
    tokens than documents (a document encodes one in its own text), `lengths()` gives each document's token
    count instead, and each end found so must hold an end-of-text."""
    total = sum(len(p) for p in parts)
    offsets = np.cumsum([0] + [len(p) for p in parts])
    found = [np.flatnonzero(np.asarray(p) == eot) + a for p, a in zip(parts, offsets)]
    ends = np.concatenate(found).astype(np.int64) if found else np.empty(0, np.int64)
    if len(ends) != documents:
        ends = np.cumsum(np.array(lengths(), dtype=np.int64) + 1) - 1
        for part, a in zip(parts, offsets):
            inside = ends[(ends >= a) & (ends < a + len(part))] - a
            if not (np.asarray(part[inside]) == eot).all():
                raise Inconsistent("the tokens do not encode the split's documents, each then end-of-text")
    if len(ends) != documents or (documents and int(ends[-1]) != total - 1):
        raise Inconsistent("the tokens do not end with the end-of-text after the split's last document")
    return np.concatenate([[0], ends[:-1] + 1]).astype(np.int64), ends


def complement(cuts: np.ndarray, total: int) -> np.ndarray:
    """[lo, hi) ranges of [0, total) outside `cuts` ((n, 2), sorted and disjoint)."""
    edges = np.concatenate([[0], cuts.reshape(-1), [total]]).reshape(-1, 2)
    return edges[edges[:, 1] > edges[:, 0]]


def cut(part: np.ndarray, offset: int, keep: np.ndarray, path: Path) -> tuple[int, str]:
    """Writes the tokens of `part` (a shard starting at `offset` in its split) that `keep` ranges cover, as raw
    bytes, to `path`; returns their count and sha256 (as `foundry.pretrain.shards.ShardWriter` computes it)."""
    sha, count = hashlib.sha256(), 0
    with open(path, "wb") as fh:
        for lo, hi in keep:
            lo, hi = max(int(lo), offset), min(int(hi), offset + len(part))
            for at in range(lo, hi, COPY_TOKENS):
                data = np.asarray(part[at - offset : min(hi, at + COPY_TOKENS) - offset]).tobytes()
                fh.write(data)
                sha.update(data)
            count += max(hi - lo, 0)
    return count, sha.hexdigest()


def ragged_without(values: np.ndarray, offsets: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A ragged array (record i is `values[offsets[i]:offsets[i + 1]]`) with only the records `keep` marks."""
    if len(offsets) != len(keep) + 1 or int(offsets[-1]) != len(values):
        raise Inconsistent(f"a ragged array holds {len(offsets) - 1} records where {len(keep)} were expected")
    lengths = np.diff(offsets)[keep]
    pieces = [values[offsets[i] : offsets[i + 1]] for i in np.flatnonzero(keep)]
    new = np.zeros(len(lengths) + 1, dtype=offsets.dtype)
    new[1:] = np.cumsum(lengths)
    kept = np.concatenate(pieces).astype(values.dtype, copy=False) if pieces else values[:0]
    return kept, new


def batched(items: Iterable, size: int) -> Iterator[list]:
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
