"""foundry.pretrain.compressors (gzip, xz, xz -9e and PPMd order 16 given the training text) and which baseline is
the strongest; how the model card and the run summary name it: tests/fast/reports/test_cards.py."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

import pyppmd
import pytest
from synthetic import synthetic_docs

from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.pretrain.compressors import compression_baselines, ppmd_bits, train_tail

TRAIN = synthetic_docs(30, seed=1)
HOLDOUT = synthetic_docs(5, seed=2)
# A version from before the strong baselines, and one after (the default run's figures, 2026-12-01).
OLD = HoldoutMetrics(
    bits_per_byte=1.56, loss=1.2, perplexity=3.3, tokens=4096, gzip_bits_per_byte=2.12, xz_bits_per_byte=1.54
)
NEW = OLD.with_scores({"xz9e_bits_per_byte": 1.5119, "ppmd_bits_per_byte": 1.3364, "baseline_train_bytes": 10484346})


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    for split, texts in (("train", TRAIN), ("holdout", HOLDOUT)):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return tmp_path


def difference(squeeze, context: bytes, holdout: bytes) -> float:
    return 8 * (len(squeeze(context + holdout)) - len(squeeze(context))) / len(holdout)


def test_every_baseline_is_the_compressors_cost_of_the_holdout_after_the_training_text(data_dir):
    train, holdout = "".join(TRAIN).encode(), "".join(HOLDOUT).encode()
    scores = compression_baselines(data_dir, context_bytes=len(train) // 2, strong_context_bytes=1 << 20)
    half = train[-(len(train) // 2) :]
    assert scores == {
        "xz9e_bits_per_byte": difference(lambda b: lzma.compress(b, preset=9 | lzma.PRESET_EXTREME), train, holdout),
        "xz_bits_per_byte": difference(lambda b: lzma.compress(b, preset=6), half, holdout),
        "gzip_bits_per_byte": difference(lambda b: gzip.compress(b, compresslevel=9, mtime=0), half, holdout),
        "ppmd_bits_per_byte": ppmd_bits(train, holdout),
        "baseline_train_bytes": len(train),  # all of it: less than the cap
    }


def test_the_strong_baselines_see_only_the_capped_tail_and_record_it(data_dir):
    scores = compression_baselines(data_dir, context_bytes=0, strong_context_bytes=1000)
    assert scores["baseline_train_bytes"] == 1000
    assert train_tail(data_dir, 1000) == "".join(TRAIN).encode()[-1000:]


def test_ppmd_incremental_reading_is_within_a_few_bytes_of_the_difference():
    train, holdout = "".join(TRAIN).encode(), "".join(HOLDOUT).encode()

    def whole(data: bytes) -> bytes:
        encoder = pyppmd.Ppmd8Encoder(16, 256 << 20, restore_method=pyppmd.PPMD8_RESTORE_METHOD_CUT_OFF)
        return encoder.encode(data) + encoder.flush()

    assert abs(ppmd_bits(train, holdout) - difference(whole, train, holdout)) * len(holdout) / 8 <= 8


def test_ppmd_learns_from_the_training_text():
    train, holdout = "".join(TRAIN).encode(), "".join(HOLDOUT).encode()
    assert ppmd_bits(train, holdout) < ppmd_bits(b"", holdout)


def test_the_strong_baselines_round_trip_through_mlflow_with_the_byte_count_an_integer():
    logged = NEW.as_mlflow()
    assert list(logged)[-3:] == [
        "holdout/xz9e_bits_per_byte",
        "holdout/ppmd_bits_per_byte",
        "holdout/baseline_train_bytes",
    ]
    read = HoldoutMetrics.from_mlflow({k: str(v) for k, v in logged.items()})  # as a version's tags
    assert read == NEW and isinstance(read.baseline_train_bytes, int)


def test_the_strongest_baseline_is_the_lowest_measured():
    assert NEW.strongest_baseline() == ("ppmd", 1.3364)
    assert OLD.strongest_baseline() == ("xz", 1.54)
    assert HoldoutMetrics(bits_per_byte=1.7).strongest_baseline() is None  # a merge: none measured
