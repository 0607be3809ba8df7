"""foundry.core.metrics.holdout: one value for the holdout scores, one place for their MLflow keys."""

from __future__ import annotations

import pytest

from foundry.core.metrics.holdout import HoldoutMetrics

FULL = HoldoutMetrics(
    loss=3.5,
    perplexity=33.1,
    bits_per_byte=1.56,
    tokens=4096,
    unigram_bits_per_byte=4.2,
    gzip_bits_per_byte=3.1,
    xz_bits_per_byte=2.9,
)


def test_mlflow_keys_round_trip_in_the_order_evaluation_logs_them():
    logged = FULL.as_mlflow()
    assert list(logged) == [
        "holdout/loss",
        "holdout/perplexity",
        "holdout/bits_per_byte",
        "holdout/tokens",
        "holdout/unigram_bits_per_byte",
        "holdout/gzip_bits_per_byte",
        "holdout/xz_bits_per_byte",
    ]
    assert HoldoutMetrics.from_mlflow(logged) == FULL


def test_legacy_tags_read_as_strings_and_other_keys_are_ignored():
    """Versions registered when metrics were copied to tags hold strings; runs log other metrics beside."""
    tags = {"holdout/bits_per_byte": "1.500000", "holdout/tokens": "128.0", "train/loss": 2.0, "data_version": "x"}
    assert HoldoutMetrics.from_mlflow(tags) == HoldoutMetrics(bits_per_byte=1.5, tokens=128)


def test_without_bits_per_byte_there_is_nothing_to_compare():
    with pytest.raises(KeyError, match="holdout/bits_per_byte"):
        HoldoutMetrics.from_mlflow({"holdout/loss": 3.0})
    assert not HoldoutMetrics.recorded_in({"holdout/loss": 3.0})


def test_a_merge_scores_bits_per_byte_only():
    merged = HoldoutMetrics(bits_per_byte=1.7)
    assert merged.as_mlflow() == {"holdout/bits_per_byte": 1.7}
    assert merged.baselines() == {} and merged.compared() == {"holdout/bits_per_byte": 1.7}


def test_baselines_added_by_name_are_checked():
    scored = HoldoutMetrics(bits_per_byte=1.5, loss=3.0)
    assert scored.with_scores({"gzip_bits_per_byte": 3.0, "xz_bits_per_byte": 2.8}).baselines() == {
        "gzip": 3.0,
        "xz": 2.8,
    }
    with pytest.raises(ValueError, match="bzip2_bits_per_byte"):
        scored.with_scores({"bzip2_bits_per_byte": 3.3})


def test_the_key_of_a_field_that_does_not_exist_is_refused():
    assert HoldoutMetrics.key("bits_per_byte") == "holdout/bits_per_byte"
    with pytest.raises(KeyError, match="bit_per_byte"):
        HoldoutMetrics.key("bit_per_byte")
