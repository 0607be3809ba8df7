"""Collect what nothing references: data versions, hydrated copies, checkpoints, downloads and MLflow runs that
no registered version, running flow or recent run refers to. A dry run unless `apply`.

    foundry gc [--keep-last 5] [--apply]          (the same, without Prefect)

or from Python: `collect_garbage(keep_last=5, apply=True)`.
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: Prefect workers import this module directly

from prefect import flow  # noqa: E402

from foundry.gc.collect import summary  # noqa: E402
from foundry.gc.items import KEEP_LAST, MIN_AGE_S  # noqa: E402
from foundry.runtime.logs import route_library_logs  # noqa: E402
from tasks.gc import apply_collection, plan_collection, publish_collection  # noqa: E402
from tasks.policy import fleet_operation_allowed  # noqa: E402


@flow(name="gc")
def collect_garbage(
    keep_last: int = KEEP_LAST,
    apply: bool = False,
    min_age_minutes: float = MIN_AGE_S / 60,
    experiment: str = "foundry",
) -> str:
    """List (and with `apply`, delete) what nothing references; the summary goes to the run page."""
    route_library_logs()
    fleet_operation_allowed("gc", apply)  # a deployment's parameters: only where the worker's operator allows
    plan = plan_collection(experiment, keep_last, min_age_minutes * 60)
    outcome = apply_collection(plan) if apply else None
    text = summary(plan, outcome)
    publish_collection(text, apply)
    return text


if __name__ == "__main__":
    print(collect_garbage())
