"""Thin Prefect tasks over `foundry.gc.collect`: plan, apply, and the summary on the flow run's page."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from foundry.gc import collect
from foundry.runtime.env import foundry_home


@task(cache_policy=NO_CACHE)
def plan_collection(experiment: str, keep_last: int, min_age_s: float) -> collect.Plan:
    """What nothing references; deletes nothing (a registry that cannot be read fails the task)."""
    return collect.plan(foundry_home(), experiment, keep_last=keep_last, min_age_s=min_age_s)


@task(cache_policy=NO_CACHE)
def apply_collection(plan: collect.Plan) -> collect.Outcome:
    """The plan's items deleted, each re-checked against a fresh read of the registry first."""
    return collect.apply(plan, foundry_home())


@task(cache_policy=NO_CACHE)
def publish_collection(summary: str, applied: bool) -> None:
    """The text `foundry gc` prints, as the run page's markdown artifact."""
    title = "gc --apply" if applied else "gc (dry run)"
    create_markdown_artifact(f"# {title}\n\n```\n{summary}\n```\n", key="gc-summary", description=title, _sync=True)
