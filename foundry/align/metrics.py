"""An aligned model's scores beside its base's, as one typed value, and the one place that names their MLflow keys.

The align flow logs them on its run as `align/<measure>` (the aligned model) and `base/<measure>` (the base it
started from); the judge logs the champion it was held to as `incumbent/<measure>`. `as_mlflow()` writes those
keys, `from_mlflow()` reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

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


class AlignmentMetrics(BaseModel):
    """The aligned model and the base it started from, scored on the same held-out data and pretraining holdout."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    aligned: AlignedScores
    base: AlignedScores

    PREFIXES: ClassVar[dict[str, str]] = {"aligned": "align", "base": "base"}  # field -> MLflow key prefix

    def as_mlflow(self) -> dict[str, float]:
        """Every measured score under its MLflow key: `align/<measure>` and `base/<measure>`."""
        return {
            key: value
            for field, who in self.PREFIXES.items()
            for key, value in getattr(self, field).as_mlflow(who).items()
        }

    @classmethod
    def from_mlflow(cls, metrics: Mapping[str, float]) -> AlignmentMetrics:
        """From a run's metrics; other keys (train/*, data/*, incumbent/*) are ignored."""
        return cls(**{field: AlignedScores.from_mlflow(metrics, who) for field, who in cls.PREFIXES.items()})

    def compared(self) -> dict[str, tuple[float | None, float]]:
        """measure -> (base, aligned) for every measure the aligned model was scored on, by name."""
        measured = {name: value for name, value in self.aligned if value is not None}
        return {name: (getattr(self.base, name), measured[name]) for name in sorted(measured)}
