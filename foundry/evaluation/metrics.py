"""Stage E, evaluate: holdout loss, perplexity and bits per byte, with a unigram baseline (the compressors' are
`compressors.py`'s).

Bits per byte divide the summed loss by the holdout's UTF-8 bytes, so models with different
tokenizers compare on the same footing; this is what promotion compares.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from foundry.data.clean import iter_texts
from foundry.data.manifest import TOKENIZER, DatasetManifest
from foundry.data.shards import load_split, split_parts
from foundry.evaluation.compressors import compression_bits_per_byte  # noqa: F401  (bench/defaults.py's)
from foundry.evaluation.holdout_metrics import HoldoutMetrics
from models.data import SequentialWindows
from models.gpt import GPT
from models.tokens import EOT

LN2 = math.log(2)


def holdout_tokens(data_dir: Path, tokenizer_path: Path):
    """The holdout as token ids under `tokenizer_path`: the shards when it is the dataset's own tokenizer."""
    if tokenizer_path.read_bytes() == (data_dir / TOKENIZER).read_bytes():
        return load_split(data_dir, "holdout")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    eot = tokenizer.token_to_id(EOT)
    ids: list[int] = []
    for text in iter_texts(data_dir / "holdout.jsonl"):
        ids += tokenizer.encode(text).ids + [eot]
    return np.asarray(ids, dtype=np.int64)


@torch.no_grad()
def score(model: GPT, tokens: np.ndarray, holdout_bytes: int, batch_size: int, max_tokens: int) -> dict[str, float]:
    """Loss over non-overlapping windows; bytes are pro-rated when only part of the holdout is scored."""
    model.eval()
    block = model.config.block_size
    total_tokens = len(tokens)
    total_nats, scored = 0.0, 0
    for x, y in SequentialWindows(tokens[: max_tokens + 1], block, batch_size):
        _, loss = model(x, y)
        total_nats += loss.item() * y.numel()
        scored += y.numel()
    scored_bytes = holdout_bytes * scored / max(1, total_tokens - 1)
    loss = total_nats / scored
    return {
        "loss": loss,
        "perplexity": math.exp(min(loss, 50)),
        "bits_per_byte": total_nats / LN2 / scored_bytes,
        "tokens": scored,
    }


def unigram_log_p(data_dir: Path, vocab_size: int) -> np.ndarray:
    """Each token's log probability (nats) by its frequency in the train split, add-one smoothed."""
    counts = sum(np.bincount(part, minlength=vocab_size) for part in split_parts(load_split(data_dir, "train")))
    counts = counts.astype(np.float64) + 1
    return np.log(counts / counts.sum())


def unigram_bits_per_byte(data_dir: Path, vocab_size: int, holdout_bytes: int) -> float:
    """Token frequencies from the train split (add-one smoothed) scored on the whole holdout."""
    log_p = unigram_log_p(data_dir, vocab_size)
    nats = sum(-log_p[part].sum() for part in split_parts(load_split(data_dir, "holdout")))
    return float(nats / LN2 / holdout_bytes)


def holdout_metrics(
    model: GPT, tokenizer_path: Path, data_dir: Path, batch_size: int, max_tokens: int
) -> HoldoutMetrics:
    """The model's loss, perplexity and bits per byte on the dataset's holdout, and the unigram baseline
    (the compression baselines are `compressors.compression_baselines`', added by the caller that wants them)."""
    manifest = DatasetManifest.read(data_dir)
    scores = score(model, holdout_tokens(data_dir, tokenizer_path), manifest.holdout_bytes, batch_size, max_tokens)
    unigram = unigram_bits_per_byte(data_dir, manifest.vocab_size, manifest.holdout_bytes)
    return HoldoutMetrics(**scores, unigram_bits_per_byte=unigram)
