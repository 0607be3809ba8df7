"""Stage A, tokenize: a byte-level BPE trained on the train split, then flat token shards.

Shards are raw little-endian arrays (`np.memmap`-readable), one end-of-text token after every
document and no other (a document's own `<|endoftext|>` is encoded as text); `manifest.json` lists each shard with its dtype, token count and sha256. Encoding is a
map over byte ranges of the split files (`encode_chunk`, in parallel); `assemble_shards` then cuts
the chunks' tokens, in order, into shards, so shards do not depend on how the work was divided.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from foundry.config import TokenizerConfig
from foundry.data.manifest import DatasetManifest
from foundry.pretrain.clean import read_chunk
from models.tokens import EOT

ENCODE_BATCH = 512
# Encodings cost ~100 bytes a token until read out: a batch of 1M characters keeps that to tens of MB.
ENCODE_BATCH_CHARS = 1 << 20
COPY_TOKENS = 1 << 22  # tokens per read while assembling shards


def train_tokenizer(texts: Iterable[str], cfg: TokenizerConfig, length: int | None = None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer, length=length)
    return tokenizer


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def _batches(texts: Iterator[str], size: int, max_chars: int = 1 << 62) -> Iterator[list[str]]:
    """Lists of at most `size` texts, cut sooner once they hold `max_chars` characters."""
    batch, chars = [], 0
    for text in texts:
        batch.append(text)
        chars += len(text)
        if len(batch) >= size or chars >= max_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


class ShardWriter:
    """Token arrays in, `<split>_NNN.bin` files of at most `shard_tokens` tokens out, in order."""

    def __init__(self, out_dir: Path, split: str, shard_tokens: int, dtype: np.dtype):
        self.out_dir, self.split, self.shard_tokens, self.dtype = out_dir, split, shard_tokens, dtype
        self.shards: list[dict] = []
        self._fh, self._count, self._sha256 = None, 0, None

    def _close_shard(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self.shards[-1].update(tokens=self._count, sha256=self._sha256.hexdigest())
            self._fh = None

    def write(self, array: np.ndarray) -> None:
        while len(array):
            if self._fh is None or self._count >= self.shard_tokens:
                self._close_shard()
                name = f"{self.split}_{len(self.shards):03d}.bin"
                self.shards.append({"file": name, "split": self.split, "dtype": self.dtype.name})
                self._fh, self._count, self._sha256 = open(self.out_dir / name, "wb"), 0, hashlib.sha256()
            take = array[: self.shard_tokens - self._count]
            data = take.astype(self.dtype.newbyteorder("<"), copy=False).tobytes()
            self._fh.write(data)
            self._sha256.update(data)  # hashed on the way out: no second read of the shard
            self._count += len(take)
            array = array[len(take) :]

    def close(self) -> list[dict]:
        self._close_shard()
        return self.shards


def _encoded(tokenizer, texts: Iterator[str]) -> Iterator[np.ndarray]:
    """Token ids with an end-of-text after every document, a batch of documents at a time."""
    eot = tokenizer.token_to_id(EOT)
    dtype = token_dtype(tokenizer.get_vocab_size())
    tail = np.array([eot], dtype=dtype)
    for batch in _batches(texts, ENCODE_BATCH, ENCODE_BATCH_CHARS):
        # encode_batch_fast: the ids encode_batch gives, without computing character offsets.
        yield np.concatenate(
            [part for enc in tokenizer.encode_batch_fast(batch) for part in (np.asarray(enc.ids, dtype=dtype), tail)]
        )


@dataclass(frozen=True)
class EncodeJob:
    """Byte ranges of the split files, each encoded into one flat token file.

    One job holds a range of each split, so a worker's share is one task, not one per split."""

    tokenizer: str
    ranges: tuple[dict, ...]  # {"texts": split file, "start", "end", "out": token file}


def encode_chunk(job: EncodeJob) -> list[dict]:
    """Map step: the tokens of each range of documents, an end-of-text after each document."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(job.tokenizer)
    # A document's text is text: `<|endoftext|>` in it is encoded as those characters, not as the control token,
    # so the end-of-text tokens in the shards are only those `_encoded` appends, one a document (the gate counts
    # them). Not saved with the tokenizer: prompts and chat templates keep their special tokens.
    tokenizer.encode_special_tokens = True
    results = []
    for chunk in job.ranges:
        count = 0
        with open(chunk["out"], "wb") as fh:
            for array in _encoded(tokenizer, read_chunk(Path(chunk["texts"]), chunk["start"], chunk["end"])):
                fh.write(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
                count += len(array)
        results.append({"out": chunk["out"], "tokens": count})
    return results


def assemble_shards(encoded: list[dict], out_dir: Path, split: str, shard_tokens: int, dtype: np.dtype) -> list[dict]:
    """Global step: the chunks' token files, in order, cut into shards; streamed a few MB at a time."""
    writer = ShardWriter(out_dir, split, shard_tokens, dtype)
    for chunk in encoded:
        # Plain reads, not a memmap: mapped pages would count in the process's memory as they are touched.
        with open(chunk["out"], "rb") as fh:
            while len(tokens := np.fromfile(fh, dtype=dtype.newbyteorder("<"), count=COPY_TOKENS)):
                writer.write(tokens)
    return writer.close()


class SplitTokens:
    """The tokens of several shards, in order, as one sequence: `len`, an index, or a slice (step 1), which
    reads only the shards it covers. `np.asarray` reads them all; `parts` are the shards' memmaps."""

    def __init__(self, parts: list[np.memmap]):
        self.parts = parts
        self.dtype = parts[0].dtype
        self._starts = np.cumsum([0] + [len(p) for p in parts])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise IndexError("SplitTokens slices take no step")
            return self._range(start, max(start, stop))
        index = int(key) + (len(self) if int(key) < 0 else 0)
        if not 0 <= index < len(self):
            raise IndexError(f"token {key} of {len(self)}")
        part = int(np.searchsorted(self._starts, index, side="right")) - 1
        return self.parts[part][index - self._starts[part]]

    def _range(self, start: int, stop: int) -> np.ndarray:
        pieces = []
        part = int(np.searchsorted(self._starts, start, side="right")) - 1
        while start < stop:
            end = min(stop, int(self._starts[part + 1]))
            pieces.append(self.parts[part][start - self._starts[part] : end - self._starts[part]])
            start, part = end, part + 1
        if not pieces:
            return np.empty(0, dtype=self.dtype)
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = np.concatenate(self.parts)
        return whole if dtype is None else whole.astype(dtype)


def load_split(data_dir: Path, split: str) -> np.memmap | SplitTokens:
    """All tokens of a split as one sequence, memmapped: nothing is read until used, and then only the
    shards a slice covers (one shard: its memmap; several: `SplitTokens` over theirs)."""
    parts = [
        np.memmap(data_dir / s.file, dtype=np.dtype(s.dtype).newbyteorder("<"), mode="r")
        for s in DatasetManifest.read(data_dir).shards_of(split)
    ]
    if not parts:
        raise ValueError(f"{data_dir} holds no {split} tokens")
    return parts[0] if len(parts) == 1 else SplitTokens(parts)


def split_parts(tokens: np.ndarray | SplitTokens) -> list[np.ndarray]:
    """The arrays a split's tokens are kept in: for work done one shard at a time."""
    return tokens.parts if isinstance(tokens, SplitTokens) else [tokens]
