"""An aligned model's scores beside its base's, as one typed value, and the one place that names their MLflow keys
(each model's scores are `foundry.core.metrics.scores.AlignedScores`, which the alignment gate reads).

The align flow logs them on its run as `align/<measure>` (the aligned model) and `base/<measure>` (the base it
started from); the judge logs the champion it was held to as `incumbent/<measure>`. `as_mlflow()` writes those
keys, `from_mlflow()` reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from foundry.core.metrics.kinds import Metrics
from foundry.core.metrics.scores import AlignedScores


class AlignmentMetrics(Metrics):
    """The aligned model and the base it started from, scored on the same held-out data and pretraining holdout."""

    kind: ClassVar[str] = "alignment"
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
