"""Thin Prefect tasks over `foundry.purge.search`: the search, the purge itself, the summary on the run's page."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from foundry.purge import apply as purge_apply
from foundry.purge import search as purge
from foundry.purge.plan import Criterion, PurgePlan
from foundry.purge.record import PurgeRecord
from foundry.runtime.env import foundry_home


@task(cache_policy=NO_CACHE)
def search(criterion: Criterion, reason: str, remotes: set[str]) -> PurgePlan:
    """Every copy of the documents and every version trained on them; changes nothing (fails closed)."""
    return purge.plan(foundry_home(), criterion, reason, remotes=remotes)


@task(cache_policy=NO_CACHE)
def remove(criterion: Criterion, reason: str, remotes: set[str], keep_models: bool) -> PurgeRecord | None:
    """The purge: every copy removed, versions rewritten, models tagged; the record kept in MLflow."""
    return purge_apply.apply(foundry_home(), criterion, reason, remotes=remotes, keep_models=keep_models)


@task(cache_policy=NO_CACHE)
def publish_purge(summary: str, applied: bool) -> None:
    """The text `foundry purge` prints (ids and counts, never text), as the run page's markdown artifact."""
    title = "purge --apply" if applied else "purge (dry run)"
    create_markdown_artifact(f"# {title}\n\n```\n{summary}\n```\n", key="purge-summary", description=title, _sync=True)
