"""The configs tests start from: configs/tiny.yaml (the CPU twin) with overrides."""

from __future__ import annotations

from conftest import REPO_ROOT

from foundry.config import FoundryConfig, load_config


def tiny(*overrides: str) -> FoundryConfig:
    """configs/tiny.yaml (the CPU twin) with `overrides`."""
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", list(overrides))


# For a flow whose test reads no compressor baseline: xz -9e and PPMd on tiny.yaml's 256 KiB of context cost
# seconds per evaluation; with none they still run (the metrics and card rows exist), on the holdout alone.
NO_BASELINES = ("evaluation.compression_context_bytes=0", "evaluation.strong_context_bytes=0")
