"""The `evaluation`, `retrain` and `registry` sections."""

from __future__ import annotations

from pydantic import Field

from foundry.config.base import _Section


class EvaluationConfig(_Section):
    max_tokens: int = Field(2_000_000, ge=1, description="Cap on holdout tokens scored.")
    batch_size: int = Field(32, ge=1)
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
    prompts: list[str] = Field(
        ["def ", "import ", "class Parser:\n    def __init__(self", "# Copyright", "    return "],
        description="Prompts whose generations are logged with every evaluation.",
    )
    max_new_tokens: int = Field(64, ge=1)
    generation_seed: int = 0


class RetrainConfig(_Section):
    cron: str = Field("0 3 * * 1", description="Schedule of the retrain deployment (Mondays 03:00 by default).")
    max_steps: int = Field(200, ge=1, description="Fine-tuning steps from the champion.")
    learning_rate: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(20, ge=0)
    replay_fraction: float = Field(0.25, ge=0, le=1, description="Share of the champion's training documents replayed.")


class RegistryConfig(_Section):
    model_name: str = Field("foundry-gpt", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    experiment: str = "foundry"
    auto_promote: bool = True
