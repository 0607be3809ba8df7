"""Stage A, tokenize: a byte-level BPE trained on the train split, then flat token shards.

Shards are raw little-endian arrays (`np.memmap`-readable), one end-of-text token after every
document; `manifest.json` lists each shard with its dtype, token count and sha256.
"""

from __future__ import annotations

import hashlib
import json
from itertools import islice
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from foundry.config import TokenizerConfig
from tasks.clean import iter_texts

EOT = "<|endoftext|>"
ENCODE_BATCH = 512


def train_tokenizer(texts: Iterable[str], cfg: TokenizerConfig, length: int | None = None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer, length=length)
    return tokenizer


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def _batches(texts: Iterator[str], size: int) -> Iterator[list[str]]:
    while batch := list(islice(texts, size)):
        yield batch


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_shards(tokenizer, texts: Iterator[str], out_dir: Path, split: str, shard_tokens: int) -> list[dict]:
    """Encode `texts` into `<split>_NNN.bin` files of at most `shard_tokens` tokens each."""
    eot = tokenizer.token_to_id(EOT)
    dtype = token_dtype(tokenizer.get_vocab_size())
    shards: list[dict] = []
    fh, count = None, 0

    def close() -> None:
        if fh is not None:
            fh.close()
            path = out_dir / shards[-1]["file"]
            shards[-1].update(tokens=count, sha256=_sha256(path))

    for batch in _batches(texts, ENCODE_BATCH):
        ids = [token for enc in tokenizer.encode_batch(batch) for token in (*enc.ids, eot)]
        array = np.asarray(ids, dtype=dtype)
        while len(array):
            if fh is None or count >= shard_tokens:
                close()
                name = f"{split}_{len(shards):03d}.bin"
                shards.append({"file": name, "split": split, "dtype": dtype.name})
                fh, count = open(out_dir / name, "wb"), 0
            take = array[: shard_tokens - count]
            fh.write(take.astype(dtype.newbyteorder("<"), copy=False).tobytes())
            count += len(take)
            array = array[len(take):]
    close()
    return shards


def tokenize_dataset(out_dir: Path, cfg: TokenizerConfig, shard_tokens: int, train_docs: int) -> dict:
    """Train the tokenizer on train.jsonl (or reuse `cfg.from_file`), shard both splits; returns the
    shard part of the manifest."""
    if cfg.from_file:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(cfg.from_file)
    else:
        tokenizer = train_tokenizer(iter_texts(out_dir / "train.jsonl"), cfg, length=train_docs)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    shards = []
    for split in ("train", "holdout"):
        shards += write_shards(tokenizer, iter_texts(out_dir / f"{split}.jsonl"), out_dir, split, shard_tokens)
    tokens = {split: sum(s["tokens"] for s in shards if s["split"] == split) for split in ("train", "holdout")}
    return {
        "vocab_size": tokenizer.get_vocab_size(), "eot_id": tokenizer.token_to_id(EOT),
        "dtype": token_dtype(tokenizer.get_vocab_size()).name, "shards": shards,
        "train_tokens": tokens["train"], "holdout_tokens": tokens["holdout"],
    }


def load_split(data_dir: Path, split: str) -> np.ndarray:
    """All tokens of a split as one array; memmapped, so nothing is read until used."""
    manifest = json.loads((data_dir / "manifest.json").read_text())
    parts = [
        np.memmap(data_dir / s["file"], dtype=np.dtype(s["dtype"]).newbyteorder("<"), mode="r")
        for s in manifest["shards"] if s["split"] == split and s["tokens"]
    ]
    if not parts:
        raise ValueError(f"{data_dir} holds no {split} tokens")
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
