"""Stage E, evaluate: holdout loss, perplexity and bits per byte, with a unigram baseline (the compressors' are
`compressors.py`'s), of a model in memory (`holdout_metrics`) or saved (`weights_metrics`; `gate_score`: the gates').

Bits per byte divide the summed loss by the holdout's UTF-8 bytes, so models with different
tokenizers compare on the same footing; this is what promotion compares. The holdout is read in windows of the
model's context; with `evaluation.window_overlap` (0.5 by default) each window repeats the end of the one before
as context, so every token after the first window is predicted from at least that share of the context, as a
compressor reading the holdout in order has what came before (each token is scored once either way).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from foundry.config import FoundryConfig
from foundry.core.metrics.holdout import HoldoutMetrics, window_stride
from foundry.data.manifest import TOKENIZER, DatasetManifest
from foundry.pretrain.clean import iter_texts
from foundry.pretrain.compressors import compression_bits_per_byte  # noqa: F401  (bench/defaults.py's)
from foundry.pretrain.shards import load_split, split_parts
from models.data import SequentialWindows
from models.gpt import GPT, load_gpt
from models.tokens import EOT

LN2 = math.log(2)


def holdout_tokens(data_dir: Path, tokenizer_path: Path):
    """The holdout as token ids under `tokenizer_path`: the shards when it is the dataset's own tokenizer."""
    if tokenizer_path.read_bytes() == (data_dir / TOKENIZER).read_bytes():
        return load_split(data_dir, "holdout")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.encode_special_tokens = True  # a document's own `<|endoftext|>` is text, as in the shards
    eot = tokenizer.token_to_id(EOT)
    ids: list[int] = []
    for text in iter_texts(data_dir / "holdout.jsonl"):
        ids += tokenizer.encode(text).ids + [eot]
    return np.asarray(ids, dtype=np.int64)


@torch.no_grad()
def score(
    model: GPT, tokens: np.ndarray, holdout_bytes: int, batch_size: int, max_tokens: int, overlap: float
) -> dict[str, float]:
    """Loss over windows of the model's context that overlap by `overlap` of it (each target scored once: see
    `SequentialWindows`); bytes are pro-rated when only part of the holdout is scored."""
    model.eval()
    block = model.config.block_size
    total_tokens = len(tokens)
    total_nats, scored = 0.0, 0
    windows = SequentialWindows(tokens[: max_tokens + 1], block, batch_size, stride=window_stride(block, overlap))
    for x, y in windows:
        _, loss = model(x, y)
        counted = int((y != -100).sum())
        total_nats += loss.item() * counted
        scored += counted
    scored_bytes = holdout_bytes * scored / max(1, total_tokens - 1)
    loss = total_nats / scored
    return {
        "loss": loss,
        "perplexity": math.exp(min(loss, 50)),
        "bits_per_byte": total_nats / LN2 / scored_bytes,
        "tokens": scored,
    }


@torch.no_grad()
def group_nats(model: GPT, ids: np.ndarray, batch_size: int, overlap: float) -> tuple[float, int]:
    """Summed loss (nats) over every next token of `ids` and how many: windows of the model's context that
    overlap by `overlap` in batches (as `score` reads the holdout), then the tail in one shorter window with the
    context the windows give, so a group shorter than a window is scored too (fleet evaluation's groups)."""
    model.eval()
    block, nats, scored, covered = model.config.block_size, 0.0, 0, 1  # ids[:covered] were targets or context
    stride = window_stride(block, overlap)
    if len(ids) > block:
        windows = SequentialWindows(ids, block, batch_size, stride=stride)
        for x, y in windows:
            counted = int((y != -100).sum())
            nats += model(x, y)[1].item() * counted
            scored += counted
        covered = windows.end()
    if covered < len(ids):
        start = max(0, covered - 1 - (block - stride))
        tail = torch.as_tensor(ids[start:])
        targets = tail[None, 1:].clone()
        targets[:, : covered - 1 - start] = -100  # scored by the last window
        nats += model(tail[None, :-1], targets)[1].item() * (len(ids) - covered)
        scored += len(ids) - covered
    return nats, scored


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
    model: GPT, tokenizer_path: Path, data_dir: Path, batch_size: int, max_tokens: int, overlap: float
) -> HoldoutMetrics:
    """The model's loss, perplexity and bits per byte on the dataset's holdout, and the unigram baseline
    (the compression baselines are `compressors.compression_baselines`', added by the caller that wants them)."""
    manifest = DatasetManifest.read(data_dir)
    tokens = holdout_tokens(data_dir, tokenizer_path)
    scores = score(model, tokens, manifest.holdout_bytes, batch_size, max_tokens, overlap)
    unigram = unigram_bits_per_byte(data_dir, manifest.vocab_size, manifest.holdout_bytes)
    return HoldoutMetrics(**scores, unigram_bits_per_byte=unigram)


def weights_metrics(weights: Path, tokenizer: Path, data_dir: Path, config: FoundryConfig) -> HoldoutMetrics:
    """`holdout_metrics` of the GPT saved at `weights` (a model.pt), tokenized with `tokenizer` (its own), read as
    the config's `evaluation` section says."""
    e, model = config.evaluation, load_gpt(weights)
    return holdout_metrics(model, tokenizer, data_dir, e.batch_size, e.max_tokens, e.window_overlap)


def gate_score(weights: Path, tokenizer: Path, data_dir: Path, config: FoundryConfig) -> float:
    """Bits per byte of a model on the holdout of `data_dir`, tokenized with its own tokenizer: what the
    pretraining, specialist and merge gates compare (`Workload.gate_score` of text)."""
    return weights_metrics(weights, tokenizer, data_dir, config).bits_per_byte
