"""The typed scores a gate reads that a feature writes: an aligned model's (the align flow measures them, the
alignment gate compares them). Here, below both, so the gates import no feature; `foundry.core.metrics.aligned` pairs
two of them and names their MLflow keys."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict


class AlignedScores(BaseModel):
    """One model on the held-out alignment data and on the pretraining holdout; None: not measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    response_loss: float | None = None  # nats per assistant token
    preference_accuracy: float | None = None  # dpo data only
    preference_margin: float | None = None  # dpo data only
    pretrain_bits_per_byte: float | None = None

    def as_mlflow(self, who: str) -> dict[str, float]:
        """The measured scores as `<who>/<measure>` (who: align, base or incumbent)."""
        return {f"{who}/{name}": float(value) for name, value in self if value is not None}

    @classmethod
    def from_mlflow(cls, metrics: Mapping[str, float], who: str) -> AlignedScores:
        """From a run's metrics, `<who>/<measure>`; other keys are ignored."""
        return cls(**{name: float(metrics[f"{who}/{name}"]) for name in cls.model_fields if f"{who}/{name}" in metrics})
