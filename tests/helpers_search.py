"""Hyperparameter search: a one-key space and a study config with a journal of the test's own."""

from __future__ import annotations

from pathlib import Path

from helpers_configs import tiny

from foundry.config import FoundryConfig

LR_ONLY = "search.space=[{key: train.learning_rate, distribution: log_uniform, low: 1.0e-7, high: 0.03}]"


def study_config(tmp_path: Path, *extra: str) -> FoundryConfig:
    """The tiny twin with a study journal of the test's own."""
    return tiny(f"search.storage={tmp_path / 'study.journal'}", "search.study_name=bookkeeping", *extra)
