"""foundry.pretrain.holdout_metrics (holdout scoring and the unigram baseline) and the rule of foundry.registry.gate."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from synthetic import prepare_synthetic, synthetic_docs

from foundry.config import TokenizerConfig
from foundry.pretrain.clean import iter_texts
from foundry.pretrain.holdout_metrics import (
    LN2,
    group_nats,
    holdout_metrics,
    holdout_tokens,
    score,
    unigram_bits_per_byte,
    window_stride,
)
from foundry.pretrain.shards import EOT, load_split, train_tokenizer
from models.gpt import GPT, GPTConfig

V, BLOCK = 64, 8


def tiny_model(vocab: int = V, block: int = BLOCK) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=vocab, block_size=block, n_layer=1, n_head=2, n_embd=16))


def manual_nats(model: GPT, tokens: np.ndarray, n_windows: int) -> float:
    """Summed cross-entropy over the first n non-overlapping windows, one window at a time."""
    total = 0.0
    with torch.no_grad():
        for w in range(n_windows):
            chunk = torch.as_tensor(np.asarray(tokens[w * BLOCK : w * BLOCK + BLOCK + 1], dtype=np.int64))
            logits, _ = model(chunk[None, :-1])
            total += F.cross_entropy(logits[0], chunk[1:], reduction="sum").item()
    return total


@pytest.fixture
def tokens() -> np.ndarray:
    return np.random.default_rng(0).integers(0, V, size=5 * BLOCK + 1).astype(np.uint16)  # five whole windows


# --- score -----------------------------------------------------------------------------------


def test_score_bits_per_byte_is_consistent(tokens):
    model = tiny_model()
    result = score(model, tokens, holdout_bytes=123, batch_size=2, max_tokens=10_000, overlap=0.0)
    assert result["tokens"] == 5 * BLOCK
    assert result["loss"] == pytest.approx(manual_nats(model, tokens, 5) / (5 * BLOCK), rel=1e-5)
    assert result["bits_per_byte"] == pytest.approx(result["loss"] * result["tokens"] / (math.log(2) * 123), rel=1e-9)
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]))
    assert result["loss"] == pytest.approx(math.log(V), abs=0.1)  # untrained: about uniform
    assert not model.training


def test_score_is_independent_of_batch_size(tokens):
    model = tiny_model()
    one = score(model, tokens, 100, batch_size=1, max_tokens=10_000, overlap=0.0)
    many = score(model, tokens, 100, batch_size=4, max_tokens=10_000, overlap=0.0)
    assert one["tokens"] == many["tokens"]
    assert one["bits_per_byte"] == pytest.approx(many["bits_per_byte"], rel=1e-5)


def test_score_drops_a_partial_last_window(tokens):
    model = tiny_model()
    ragged = np.concatenate([tokens, tokens[:3]])  # 3 tokens that do not fill a window
    result = score(model, ragged, holdout_bytes=440, batch_size=2, max_tokens=10_000, overlap=0.0)
    assert result["tokens"] == 5 * BLOCK
    # Bytes pro-rated to the scored share of the holdout's tokens.
    scored_bytes = 440 * (5 * BLOCK) / (len(ragged) - 1)
    assert result["bits_per_byte"] == pytest.approx(manual_nats(model, ragged, 5) / LN2 / scored_bytes, rel=1e-5)


def test_score_pro_rates_bytes_when_max_tokens_caps(tokens):
    model = tiny_model()
    result = score(model, tokens, holdout_bytes=400, batch_size=2, max_tokens=2 * BLOCK, overlap=0.0)
    assert result["tokens"] == 2 * BLOCK
    scored_bytes = 400 * (2 * BLOCK) / (len(tokens) - 1)  # 2 of the 5 windows' worth of bytes
    assert result["bits_per_byte"] == pytest.approx(manual_nats(model, tokens, 2) / LN2 / scored_bytes, rel=1e-5)


def test_score_needs_a_window(tokens):
    with pytest.raises(ValueError, match="too few"):
        score(tiny_model(), tokens[:4], 10, batch_size=2, max_tokens=10_000, overlap=0.0)


def context_nats(model: GPT, tokens: np.ndarray, stride: int, targets: range) -> float:
    """Summed cross-entropy of each target position p, one forward each, given the tokens from the start of the
    first window that holds it (windows start every `stride`; the one at k * stride holds k * stride + 1 ..
    k * stride + BLOCK): at least BLOCK - stride tokens of context once past the first window."""
    total = 0.0
    with torch.no_grad():
        for p in targets:
            start = max(0, -(-(p - BLOCK) // stride)) * stride
            context = torch.as_tensor(np.asarray(tokens[start:p], dtype=np.int64))
            logits, _ = model(context[None])
            total += F.cross_entropy(logits[0, -1:], torch.as_tensor([int(tokens[p])])).item()
    return total


@pytest.mark.parametrize("overlap, stride", [(0.5, 4), (0.75, 2), (0.0, BLOCK)])
def test_overlapping_windows_give_each_target_its_context(tokens, overlap, stride):
    model = tiny_model()
    result = score(model, tokens, holdout_bytes=123, batch_size=3, max_tokens=10_000, overlap=overlap)
    assert window_stride(BLOCK, overlap) == stride
    scored = result["tokens"]
    assert scored == 5 * BLOCK  # the windows end on the last token: every target scored once
    expected = context_nats(model, tokens, stride, range(1, scored + 1))
    assert result["loss"] * scored == pytest.approx(expected, rel=1e-4)


def test_overlap_pro_rates_the_unscored_tail(tokens):
    model = tiny_model()
    ragged = np.concatenate([tokens, tokens[:3]])  # windows every 4 tokens leave the last 3 targets out
    result = score(model, ragged, holdout_bytes=440, batch_size=2, max_tokens=10_000, overlap=0.5)
    assert result["tokens"] == 5 * BLOCK
    scored_bytes = 440 * (5 * BLOCK) / (len(ragged) - 1)
    expected = context_nats(model, ragged, 4, range(1, 5 * BLOCK + 1))
    assert result["bits_per_byte"] == pytest.approx(expected / LN2 / scored_bytes, rel=1e-4)
    capped = score(model, tokens, holdout_bytes=400, batch_size=2, max_tokens=2 * BLOCK, overlap=0.5)
    assert capped["tokens"] == 2 * BLOCK  # windows at 0, 4 and 8 within the first 17 tokens
    capped_nats = context_nats(model, tokens, 4, range(1, 2 * BLOCK + 1))
    assert capped["bits_per_byte"] == pytest.approx(capped_nats / LN2 / (400 * 2 * BLOCK / (len(tokens) - 1)), rel=1e-4)


def test_a_groups_tail_is_scored_with_the_windows_context(tokens):
    model = tiny_model()
    ids = np.concatenate([tokens, tokens[:3]]).astype(np.int64)  # 44 tokens: windows every 4 end on token 40
    nats, scored = group_nats(model, ids, batch_size=2, overlap=0.5)
    assert scored == len(ids) - 1
    tail = torch.as_tensor(ids[36:])  # the last 3 targets after the 4 tokens the last window ended with
    with torch.no_grad():
        logits, _ = model(tail[None, :-1])
    tail_nats = F.cross_entropy(logits[0, -3:], tail[-3:], reduction="sum").item()
    assert nats == pytest.approx(context_nats(model, ids, 4, range(1, 41)) + tail_nats, rel=1e-4)
    # Without overlap the tail is its own short window, as before.
    nats0, scored0 = group_nats(model, ids, batch_size=2, overlap=0.0)
    with torch.no_grad():
        short = torch.as_tensor(ids[40:])
        short_nats = F.cross_entropy(model(short[None, :-1])[0][0], short[1:], reduction="sum").item()
    assert scored0 == scored and nats0 == pytest.approx(manual_nats(model, ids, 5) + short_nats, rel=1e-4)


# --- on a prepared dataset -------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    _, prepared, manifest = prepare_synthetic(tmp_path_factory.mktemp("evaluate"))
    return prepared, manifest


def test_unigram_bits_per_byte(dataset):
    data_dir, manifest = dataset
    holdout_bytes = manifest["stats"]["holdout_bytes"]
    bpb = unigram_bits_per_byte(data_dir, manifest["vocab_size"], holdout_bytes)
    assert math.isfinite(bpb) and bpb > 0
    # Independent computation: add-one smoothed train frequencies, scored on every holdout token.
    train, holdout = np.asarray(load_split(data_dir, "train")), np.asarray(load_split(data_dir, "holdout"))
    counts = np.bincount(train, minlength=manifest["vocab_size"]) + 1.0
    expected = -np.log2(counts[holdout] / counts.sum()).sum() / holdout_bytes
    assert bpb == pytest.approx(expected, rel=1e-9)
    # Better than a uniform guess over the vocabulary.
    assert bpb < len(holdout) * math.log2(manifest["vocab_size"]) / holdout_bytes


def test_holdout_tokens_with_the_dataset_tokenizer(dataset, tmp_path):
    data_dir, _ = dataset
    copy = tmp_path / "tokenizer.json"
    copy.write_bytes((data_dir / "tokenizer.json").read_bytes())
    assert np.array_equal(holdout_tokens(data_dir, copy), load_split(data_dir, "holdout"))


def test_holdout_tokens_with_another_tokenizer(dataset, tmp_path):
    data_dir, _ = dataset
    other = train_tokenizer(iter(synthetic_docs(10, seed=5)), TokenizerConfig(vocab_size=270))
    other.save(str(tmp_path / "other.json"))
    ids = holdout_tokens(data_dir, tmp_path / "other.json")
    eot = other.token_to_id(EOT)
    expected = [t for text in iter_texts(data_dir / "holdout.jsonl") for t in (*other.encode(text).ids, eot)]
    assert ids.tolist() == expected


def test_evaluate_reports_prefixed_metrics(dataset):
    data_dir, manifest = dataset
    model = tiny_model(vocab=manifest["vocab_size"], block=16)
    metrics = holdout_metrics(model, data_dir / "tokenizer.json", data_dir, batch_size=4, max_tokens=10**9, overlap=0.0)
    assert set(metrics.as_mlflow()) == {
        f"holdout/{k}" for k in ("loss", "perplexity", "bits_per_byte", "tokens", "unigram_bits_per_byte")
    }
    n = (manifest["holdout_tokens"] - 1) // 16 * 16
    assert metrics.tokens == n
    scored_bytes = manifest["stats"]["holdout_bytes"] * n / (manifest["holdout_tokens"] - 1)
    assert metrics.bits_per_byte == pytest.approx(metrics.loss * n / (LN2 * scored_bytes), rel=1e-9)
    assert json.loads((data_dir / "manifest.json").read_text()) == manifest  # evaluation reads only
