"""What `foundry gc` keeps: everything a registered version, a running flow (of any experiment) or one of the last N
runs refers to.

Read from the registry and the tracking store in one pass; any error reading them (a server that is down, a
database error, a tag that does not hold what its name says) is `RegistryUnreadable`, and gc deletes nothing:
what cannot be seen might be referenced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from foundry.config import ConfigError
from foundry.core.contracts import DATA_VERSION, check_data_version
from foundry.core.model_uri import LoggedModelUri, ModelUri, RunsUri
from foundry.core.run_tags import RunTags
from foundry.core.version_tags import VersionTags
from foundry.data.remote import digest_of
from foundry.registry import tags as registry_tags
from foundry.registry.versions import PURGE_EXPERIMENT as PURGES
from foundry.runtime.run_owner import owner_gone

PAGE = 1000


class RegistryUnreadable(RuntimeError):
    """The registry or the tracking store could not be listed completely: gc refuses, nothing is deleted."""


class NotCollectable(ConfigError):
    """gc was pointed at an experiment whose runs are records, never garbage (the purge records)."""


@dataclass
class Kept:
    """What must stay, each with the reason it is kept (shown in the dry run's notes)."""

    runs: dict[str, str] = field(default_factory=dict)  # run id -> why
    data_versions: dict[str, str] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)  # mirror folder names (`digest_of` a kept run's sources)
    model_folders: set[str] = field(default_factory=set)  # models/<name>-v<version> of registered versions
    logged_models: set[str] = field(default_factory=set)  # m-... sources of registered versions
    # Start of the oldest of the last N runs: unfinished checkpoints newer than it are kept (none kept: no last run).
    since_ms: float = float("inf")
    experiment_id: str | None = None  # the experiment gc collects runs from (None: it does not exist)
    candidate_runs: dict[str, object] = field(default_factory=dict)  # run id -> MLflow Run, for runs not kept

    def keep_data(self, value: str, why: str) -> None:
        self.data_versions.setdefault(check_data_version(value), why)


def data_tags(tags: dict[str, str]) -> list[str]:
    """Every data version a set of tags names: `data_version`, `pretrain.data_version`, `parent_data_version`…"""
    return VersionTags.data_versions_named(tags)


def run_sources(params: dict[str, str]) -> list[str]:
    """The data sources a run read, from its params (`data.source`, and `data.sources` as a JSON list)."""
    found = [params["data.source"]] if params.get("data.source") else []
    try:
        found += [s for s in json.loads(params.get("data.sources") or "[]") if isinstance(s, str)]
    except ValueError:
        pass
    return found


def registered_versions(client) -> list:
    found, token = [], None
    while True:
        page = client.search_model_versions(max_results=PAGE, page_token=token)
        found += list(page)
        token = page.token
        if not token:
            return found


def _keep_registered(client, kept: Kept) -> None:
    for version in registered_versions(client):
        uri = ModelUri.of(version)
        why = f"run of registered {uri}"
        kept.runs.setdefault(version.run_id, why)
        kept.runs.setdefault(registry_tags.run_id(version), why)  # checked: a bad tag stops gc
        for value in data_tags(version.tags):
            try:
                kept.keep_data(value, f"data of registered {uri}")
            except ValueError:
                raise registry_tags.BadTag(f"{uri} names data version {value!r}, not 32 hex digits") from None
        kept.model_folders.add(uri.folder)
        source = version.source or ""
        if run_id := RunsUri.run_id_in(source):
            kept.runs.setdefault(run_id, why)
        if model_id := LoggedModelUri.id_in(source):
            kept.logged_models.add(model_id)


def experiment_runs(client, experiment_id: str) -> list:
    """The experiment's active runs, newest first."""
    found, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], max_results=PAGE, order_by=["attributes.start_time DESC"], page_token=token
        )
        found += list(page)
        token = page.token
        if not token:
            return found


def running_everywhere(client) -> list:
    """Runs still RUNNING in every experiment: a flow of another experiment may be reading any data version."""
    found, token = [], None
    while True:
        page = client.search_experiments(max_results=PAGE, page_token=token)
        found += [experiment.experiment_id for experiment in page]
        token = page.token
        if not token:
            break
    running = []
    for start in range(0, len(found), 100):  # MLflow searches at most 100 experiments at once
        token = None
        while True:
            ids = found[start : start + 100]
            page = client.search_runs(ids, "attributes.status = 'RUNNING'", max_results=PAGE, page_token=token)
            running += list(page)
            token = page.token
            if not token:
                break
    return [run for run in running if not owner_gone(run.data.tags)]


def _keep_running(client, kept: Kept) -> None:
    for run in running_everywhere(client):
        run_id = run.info.run_id
        kept.runs.setdefault(run_id, "running")
        for value in data_tags(run.data.tags):
            if DATA_VERSION.fullmatch(value):
                kept.keep_data(value, f"data of running run {run_id}")
        kept.sources |= {digest_of(source) for source in run_sources(run.data.params)}


def _keep_runs(client, kept: Kept, experiment: str, keep_last: int) -> None:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return
    kept.experiment_id = found.experiment_id
    runs = experiment_runs(client, found.experiment_id)
    for run in runs[:keep_last]:
        kept.runs.setdefault(run.info.run_id, f"one of the last {keep_last} runs")
    if runs[:keep_last]:
        kept.since_ms = runs[:keep_last][-1].info.start_time or 0
    by_id = {run.info.run_id: run for run in runs}
    _close_over_nesting(kept, by_id)
    for run_id in kept.runs:
        if run := by_id.get(run_id):
            for value in data_tags(run.data.tags):
                if DATA_VERSION.fullmatch(value):
                    kept.keep_data(value, f"data of kept run {run_id} ({kept.runs[run_id]})")
            kept.sources |= {digest_of(source) for source in run_sources(run.data.params)}
    kept.candidate_runs = {i: r for i, r in by_id.items() if i not in kept.runs}


def _close_over_nesting(kept: Kept, by_id: dict) -> None:
    """A kept run keeps its parent and its nested runs (a search's trials)."""
    children: dict[str, list[str]] = {}
    for run_id, run in by_id.items():
        if parent := RunTags.parent_run_of(run.data.tags):
            children.setdefault(parent, []).append(run_id)
    todo = list(kept.runs)
    while todo:
        run_id = todo.pop()
        run = by_id.get(run_id)
        parent = RunTags.parent_run_of(run.data.tags) if run else None
        related = children.get(run_id, []) + ([parent] if parent is not None else [])
        for other in related:
            if other not in kept.runs:
                kept.runs[other] = f"nested with kept run {run_id}"
                todo.append(other)


def workspace_version(home: Path) -> str | None:
    """The version checked out in the DVC workspace (its `dvc.lock`): a pipeline may be about to record it."""
    try:
        lock = yaml.safe_load((home / "workspace" / "dvc.lock").read_text())
        out = next(o for o in lock["stages"]["prepare"]["outs"] if o["path"] == "prepared")
        return out["md5"].removesuffix(".dir")
    except (OSError, KeyError, TypeError, StopIteration, yaml.YAMLError):
        return None


def gather(client, home: Path, experiment: str, keep_last: int) -> Kept:
    """Everything that stays; `RegistryUnreadable` when the registry or the runs cannot be listed whole."""
    if experiment == PURGES:
        raise NotCollectable(
            f"gc never collects the experiment {PURGES!r}: its runs are the purge records; "
            "set registry.experiment to the pipeline's experiment"
        )
    kept = Kept()
    try:
        _keep_registered(client, kept)
        _keep_running(client, kept)
        _keep_runs(client, kept, experiment, keep_last)
    except Exception as exc:
        raise RegistryUnreadable(
            f"cannot list the model registry and the runs of experiment {experiment!r} completely "
            f"({type(exc).__name__}: {exc}); gc deletes nothing it cannot prove unreferenced"
        ) from exc
    if current := workspace_version(home):
        kept.data_versions.setdefault(current, "checked out in the DVC workspace")
    return kept
