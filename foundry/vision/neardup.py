"""Perceptual near duplicates: a difference hash (dHash) per image and an exact Hamming-radius search.

dHash (Krawetz): the grayscale image shrunk to (n+1) x n, one bit per horizontally adjacent pair (is the
left pixel brighter?). Resizing, recompression and small colour changes flip few bits; another picture
flips about half. The search is exact, not probabilistic: cut the bits into d+1 bands; two hashes within
distance d agree on at least one whole band (pigeonhole), so a band's exact value finds every candidate.
"""

from __future__ import annotations

import numpy as np
from PIL import Image


def dhash(image: Image.Image, size: int) -> np.ndarray:
    """(size*size,) bool: the difference hash of `image` (any mode)."""
    small = image.convert("L").resize((size + 1, size), Image.Resampling.BOX)
    pixels = np.asarray(small, dtype=np.int16)
    return (pixels[:, :-1] > pixels[:, 1:]).ravel()


def words_of(packed: bytes, words: int) -> np.ndarray:
    """Hashes packed as `np.packbits` packs them, each zero-padded to `words` big-endian uint32 words, as uint32
    words, one hash a row: the width the split ledger stores signatures in."""
    return np.frombuffer(packed, ">u4").reshape(-1, words).astype(np.uint32)


def from_words(words: np.ndarray, bits: int) -> np.ndarray:
    return np.unpackbits(words.astype(">u4").view(np.uint8))[:bits].astype(bool)


def hash_words(hash_size: int) -> int:
    """uint32 words per packed hash: the ledger's signature width for this hash size."""
    return -(-(hash_size * hash_size) // 32)


def _as_int(bits: np.ndarray) -> int:
    """The bits as one integer (first bit highest): what the index keeps, ~60 bytes for 256 bits."""
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


class NearIndex:
    """Kept hashes, asked for one within `distance` bits of a new hash; first kept wins on ties.

    Hashes and band values are kept as integers and a band value's one entry without a list: at 50,000 images an
    array a hash and a list a band value held ~1.2 KB an image, integers ~0.4 KB (bench/README.md, vision)."""

    def __init__(self, bits: int, distance: int):
        self.distance = distance
        self.bands = np.array_split(np.arange(bits), distance + 1) if distance >= 0 else []
        self.buckets: list[dict[int, int | list[int]]] = [{} for _ in self.bands]
        self.hashes: list[int] = []
        self.keys: list[str] = []

    def add(self, bits: np.ndarray, key: str) -> None:
        index = len(self.hashes)
        self.hashes.append(_as_int(bits))
        self.keys.append(key)
        for band, bucket in zip(self.bands, self.buckets):
            value = _as_int(bits[band])
            held = bucket.get(value)
            if held is None:
                bucket[value] = index
            elif isinstance(held, list):
                held.append(index)
            else:
                bucket[value] = [held, index]

    def nearest(self, bits: np.ndarray) -> tuple[str, int] | None:
        """(key, distance) of the earliest kept hash within the distance, or None."""
        candidates = set()
        for band, bucket in zip(self.bands, self.buckets):
            held = bucket.get(_as_int(bits[band]))
            if held is not None:
                candidates.update(held if isinstance(held, list) else (held,))
        query = _as_int(bits)
        for index in sorted(candidates):
            distance = (self.hashes[index] ^ query).bit_count()
            if distance <= self.distance:
                return self.keys[index], distance
        return None
