"""The `evaluation`, `retrain` and `registry` sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from foundry.config.base import _Section
from foundry.config.training import train_override
from foundry.core.model_uri import check_name

# Measured in float32, uncompiled (bench/README.md), which it keeps when `train` pretrains otherwise.
RetrainTrain = train_override(
    "RetrainTrain",
    __name__,
    "Keys of `train` a retrain sets otherwise (fine-tuning from the champion: fewer steps, a lower peak); "
    "the rest, and any key set to null, are `train`'s.",
    max_steps=200,
    learning_rate=1e-3,
    warmup_steps=20,
    precision="32-true",
    compile=False,
    weight_decay=0.1,
)


class EvaluationConfig(_Section):
    max_tokens: int = Field(2_000_000, ge=1, description="Most holdout tokens scored, from its start.")
    batch_size: int = Field(
        32,
        ge=1,
        description="Rows per forward pass while scoring: windows of model.block_size tokens of the holdout "
        "(alignment: held-out conversations or pairs).",
    )
    window_overlap: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="Share of each scoring window that repeats the end of the one before as context, each token "
        "scored once: 0.5 gives every token after the first window at least half of model.block_size before it, in "
        "twice the forward passes; 0 scores non-overlapping windows (as versions from before 2026-12-04 were scored).",
    )
    min_improvement: float = Field(0.0, ge=0, description="Bits per byte a challenger must gain to be champion.")
    max_regression: float = Field(
        0.02,
        ge=0,
        description="Forgetting guard, bits per byte a model may lose on an older holdout and still pass: a "
        "challenger against the champion on the champion's own holdout (pretraining and retraining gate), and an "
        "aligned model against the base it started from on the base's pretraining holdout (alignment gate).",
    )
    compression_context_bytes: int = Field(
        8 << 20, ge=0, description="Training text (its tail) that gzip and xz see before the holdout."
    )
    strong_context_bytes: int = Field(
        16 << 20,
        ge=0,
        description="Training text (its tail) that the strongest baselines, PPMd order 16, xz -9e and zpaq, see before "
        "the holdout: the whole default training split (10.0 MiB); PPMd's 256 MiB model holds about 12 MiB of it.",
    )
    baselines: list[Literal["zpaq4", "zpaq5"]] = Field(
        ["zpaq4"],
        description="Optional baselines, scored beside unigram, gzip, xz, xz -9e and PPMd and given the same training "
        "text as the strongest: zpaq4 (zpaq -m4: 1.2599 bits/byte on the default data, about 15 CPU seconds more) "
        "and zpaq5 (zpaq -m5, the strongest: 1.1727, about 75 CPU seconds and 300 MiB more, so off by default for "
        "`make run`'s time). Both need the `zpaq` package; without it they are named as absent, never scored.",
    )
    prompts: list[str] = Field(
        ["def ", "import ", "class Parser:\n    def __init__(self", "# Copyright", "    return "],
        description="Prompts whose generations are logged with every evaluation.",
    )
    max_new_tokens: int = Field(
        64, ge=1, description="Most tokens generated after each prompt (sampled at temperature 0.8, top-k 40)."
    )
    generation_seed: int = Field(
        0, description="Seed of each prompt's sampling, so one model generates the same texts every time."
    )


class RetrainConfig(_Section):
    cron: str = Field("0 3 * * 1", description="Schedule of the retrain deployment (Mondays 03:00 by default).")
    train: RetrainTrain = Field(
        RetrainTrain(),
        description="Keys of `train` a retrain sets otherwise; a key left out or null keeps `train`'s value.",
    )
    replay_fraction: float = Field(0.25, ge=0, le=1, description="Share of the champion's training documents replayed.")


class RegistryConfig(_Section):
    model_name: str = Field(
        "foundry-gpt",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$",
        description="Registered model that training and retraining publish versions to; retraining starts from its "
        "@champion.",
    )
    experiment: str = Field("foundry", description="MLflow experiment the runs are logged to (created when missing).")
    auto_promote: bool = Field(
        True,
        description="A version that passes its gate becomes @champion at once; false: it stays @challenger until a "
        "reviewer promotes it.",
    )

    @field_validator("model_name")
    @classmethod
    def _a_name_registration_takes(cls, name: str) -> str:
        """Refused when the config loads, not at registration after the training (`a..b`)."""
        return check_name(name)
