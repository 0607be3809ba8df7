"""How far a compressed source may inflate: the `data.max_inflated_bytes` and `data.max_inflation_ratio`
limits shared by archive extraction (`foundry.data.archives`), gzip-compressed files and parquet files, whose
pages compress on their own (`foundry.data.formats`).

Both are enforced on the bytes actually produced, never on what a header declares: a zip's sizes and a
sparse tar member's holes are the attacker's to choose.
"""

from __future__ import annotations

import io

from foundry.config import DataConfig

# Below this much output the ratio is not checked: a small file of repeated lines may compress 1000x
# and costs nothing to inflate.
RATIO_FLOOR = 1 << 20


class TooLarge(RuntimeError):
    """Input past one of the data size limits; the message names the input and the key."""


def inflation_limit(cfg: DataConfig, packed_bytes: int) -> tuple[int, str]:
    """(most bytes `packed_bytes` of compressed input may become, the config key that sets that number)."""
    by_ratio = max(int(cfg.max_inflation_ratio * packed_bytes), RATIO_FLOOR)
    if by_ratio < cfg.max_inflated_bytes:
        return by_ratio, "data.max_inflation_ratio"
    return cfg.max_inflated_bytes, "data.max_inflated_bytes"


class _Capped(io.RawIOBase):
    """A readable stream that raises `TooLarge` once more than `limit` bytes have come out of it."""

    def __init__(self, inner: io.IOBase, limit: int, what: str) -> None:
        self.inner, self.limit, self.what, self.count = inner, limit, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.inner.read(min(len(buffer), self.limit + 1 - self.count) or 1)
        self.count += len(data)
        if self.count > self.limit:
            raise TooLarge(self.what)
        buffer[: len(data)] = data
        return len(data)


def capped(inner: io.IOBase, limit: int, what: str) -> io.BufferedReader:
    """`inner`, buffered (peek and readline work), failing with `TooLarge(what)` past `limit` bytes."""
    return io.BufferedReader(_Capped(inner, limit, what), 1 << 16)
