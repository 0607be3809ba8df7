"""The base every metrics type derives from, and the family that lets a field take any of them.

Each concrete metrics type names its `kind` (`HoldoutMetrics`: "holdout", `VisionMetrics`: "vision",
`AlignmentMetrics`: "alignment"; a new workload's, in its own folder, a kind of its own) and so registers itself in
`METRICS`. A field typed `AnyMetrics` (a candidate's metrics) takes any of them, and one typed
`foundry.core.metrics.baselines.AnyBaselined` (a training flow's result) any of those scored beside baselines: see
`foundry.core.open_union`. A stored dict is read as the one registered type it validates as (their required fields
differ, and none takes another's fields), as the closed unions these replace read it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from foundry.core.open_union import Family, member_of

METRICS = Family("metrics type")


class Metrics(BaseModel):
    """A model's scores, of whatever kind: a class that sets `kind` is a metrics type fields can hold."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ClassVar[str] = ""  # set by a concrete type: its key in METRICS; a base without one is not registered

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            METRICS.register(cls.kind, cls)


AnyMetrics = member_of(Metrics, METRICS)
