"""What a model's holdout scores share whatever the model reads: MLflow keys under `holdout/`, the baselines a model
should beat, the strongest of them, and the figures a reproduction compares.

`foundry.core.metrics.holdout.HoldoutMetrics` (text) and `foundry.core.metrics.images.VisionMetrics` (images) derive
from `BaselinedMetrics` and say in class attributes what differs: the gate's figure, the suffix of a baseline's field
and whether a higher score is the better one. A field typed `AnyBaselined` takes any of them
(`foundry.core.open_union`): a new workload's, defined in its own folder, too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from foundry.core.metrics.kinds import METRICS, Metrics
from foundry.core.open_union import member_of

PREFIX = "holdout/"


class BaselinedMetrics(Metrics):
    """A model's scores on a holdout beside the baselines it should beat; subclasses declare the fields (and their
    `kind`: `foundry.core.metrics.kinds`)."""

    BASELINES: ClassVar[tuple[str, ...]] = ()  # baseline names; `<name><BASELINE_SUFFIX>` is each one's field
    LABELS: ClassVar[dict[str, str]] = {}  # how cards and summaries name each baseline
    COUNTS: ClassVar[tuple[str, ...]] = ()  # integers, stored as floats
    COMPARED: ClassVar[tuple[str, ...]] = ()  # what a reproduction must match
    GATE_FIGURE: ClassVar[str] = ""  # the one field always there: what promotion compares
    BASELINE_SUFFIX: ClassVar[str] = ""
    HIGHER_IS_BETTER: ClassVar[bool] = False
    NOT_SCALAR: ClassVar[frozenset[str]] = frozenset()  # fields with no single `holdout/<field>` key

    @classmethod
    def key(cls, field: str) -> str:
        """The MLflow metric (or legacy tag) name of a field: `holdout/<field>`."""
        if field not in cls.model_fields or field in cls.NOT_SCALAR:
            scalars = [name for name in cls.model_fields if name not in cls.NOT_SCALAR]
            raise KeyError(f"{cls.__name__} has no scalar field {field!r}; it has {', '.join(scalars)}")
        return PREFIX + field

    def as_mlflow(self) -> dict[str, float]:
        """The fields that were measured, under their MLflow keys, in the order they are declared (the order
        evaluation has always logged them in)."""
        return {
            self.key(name): float(value) for name, value in self if value is not None and name not in self.NOT_SCALAR
        }

    @classmethod
    def recorded_in(cls, metrics: Mapping[str, Any]) -> bool:
        """Whether these metrics or tags hold these holdout scores at all."""
        return cls.key(cls.GATE_FIGURE) in metrics

    @classmethod
    def recorded_scalars(cls, metrics: Mapping[str, float | str]) -> dict[str, float | int]:
        """The scalar fields among a run's metrics or a version's tags (values may be strings), typed; other keys
        are ignored."""
        if not cls.recorded_in(metrics):
            raise KeyError(f"no {cls.key(cls.GATE_FIGURE)} among the recorded metrics ({', '.join(sorted(metrics))})")
        names = [name for name in cls.model_fields if name not in cls.NOT_SCALAR and cls.key(name) in metrics]
        # MLflow stores every metric as a float, tags as strings
        return {
            name: int(float(metrics[cls.key(name)])) if name in cls.COUNTS else float(metrics[cls.key(name)])
            for name in names
        }

    @classmethod
    def from_mlflow(cls, metrics: Mapping[str, float | str]) -> Self:
        """From a run's metrics or a version's tags (values may be strings); other keys are ignored."""
        return cls.model_validate(cls.recorded_scalars(metrics))

    def baselines(self) -> dict[str, float]:
        """The baselines that were measured, by name."""
        scores = {name: getattr(self, name + self.BASELINE_SUFFIX) for name in self.BASELINES}
        return {name: value for name, value in scores.items() if value is not None}

    def strongest_baseline(self) -> tuple[str, float] | None:
        """The measured baseline with the best score (the highest or the lowest, as `HIGHER_IS_BETTER` says), by
        name; None when none was measured."""
        scores = self.baselines()
        if not scores:
            return None
        best = max if self.HIGHER_IS_BETTER else min
        return best(scores.items(), key=lambda item: item[1])

    def compared(self) -> dict[str, float]:
        """The figures a reproduction checks, under their MLflow keys, for those that were measured."""
        return {self.key(name): float(getattr(self, name)) for name in self.COMPARED if getattr(self, name) is not None}


# A field that takes any registered metrics type scored beside baselines: what a trained model's holdout gives.
AnyBaselined = member_of(BaselinedMetrics, METRICS)
