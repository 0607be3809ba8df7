"""`foundry gc`: list, size and (with `apply`) delete the state that nothing refers to any more.

Kept (`gc_refs.gather`): every registered version's runs, data versions, downloads and logged model; every
running flow's run and data, in any experiment; the last `keep_last` runs of the experiment, their parents and nested runs; what those runs
read (data versions, source mirrors); the version checked out in the DVC workspace. Candidates (`gc_scan`):
data versions and unlisted objects of the workspace's DVC cache, hydrated copies and the hydration cache,
unfinished checkpoints older than the kept runs, run folders, source mirrors, model downloads, MLflow runs.

Never touched: the DVC remote (`reproduce` and `hydrate` pull every kept version from it, and it may be shared),
the sources themselves, `ledgers/`, `search/`, `locks/`, `logs/`. `apply` reads the registry again and re-checks
each item just before deleting it; a registry that cannot be read stops gc before anything is deleted. Deletion
goes through `foundry.core.fs` only: confined to the item's folder, never through a symbolic link.

    foundry gc [--keep-last 5] [--apply]
"""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from foundry.core.fs import OutsideFolder, remove_file, remove_tree
from foundry.gc import scan
from foundry.gc.items import KEEP_LAST, MIN_AGE_S, Candidate, freed, human, newest_change, reclaimable, stats
from foundry.gc.refs import Kept, NotCollectable, RegistryUnreadable, gather
from foundry.runtime.run_owner import owner_gone

log = logging.getLogger(__name__)
__all__ = [
    "KEEP_LAST",
    "MIN_AGE_S",
    "NotCollectable",
    "Outcome",
    "Plan",
    "RegistryUnreadable",
    "apply",
    "plan",
    "table",
]


class Busy(RuntimeError):
    """A lock that says work in progress holds the item."""


@dataclass(frozen=True)
class Plan:
    items: tuple[Candidate, ...]
    bytes: int  # what deleting every item frees
    experiment: str
    keep_last: int
    min_age_s: float
    kept: dict[str, int]  # what stays, counted by kind


@dataclass(frozen=True)
class Outcome:
    removed: tuple[Candidate, ...]
    skipped: tuple[tuple[Candidate, str], ...]  # and why
    bytes: int  # reclaimed
    mlflow_artifacts_freed: bool  # False: a tracking server's run artifacts wait for its own `mlflow gc`


def _client():
    from foundry.runtime.tracking import client

    return client()


def _candidates(home: Path, kept: Kept, client, min_age_s: float) -> list[Candidate]:
    runs = scan.mlflow_runs(home, kept, client, min_age_s)
    return [
        *scan.dvc_cache(home / "workspace" / ".dvc" / "cache", kept, ("data version", "cache objects"), min_age_s),
        *scan.hydrated_copies(home, kept, min_age_s),
        *scan.dvc_cache(home / "hydrated" / ".cache", kept, ("hydration cache", "hydration cache"), min_age_s),
        *scan.checkpoints(home, kept, min_age_s),
        *scan.source_mirrors(home, kept, min_age_s),
        *scan.model_copies(home, kept, min_age_s),
        *runs,
        *scan.run_folders(home, kept, client, min_age_s, {run.ref for run in runs}),
    ]


def plan(home: Path, experiment: str, keep_last: int = KEEP_LAST, min_age_s: float = MIN_AGE_S, client=None) -> Plan:
    """What `apply` would delete; deletes nothing. `RegistryUnreadable` when the registry cannot be listed."""
    if keep_last < 0:
        raise ValueError(f"--keep-last must be 0 or more, not {keep_last}")
    client = client or _client()
    kept = gather(client, home, experiment, keep_last)
    items = tuple(_candidates(home, kept, client, min_age_s))
    counts = {"runs": len(kept.runs), "data versions": len(kept.data_versions), "model copies": len(kept.model_folders)}
    return Plan(items, reclaimable(items), experiment, keep_last, min_age_s, counts)


def apply(done: Plan, home: Path, client=None) -> Outcome:
    """Delete the plan's items, each re-checked against a fresh read of the registry just before it goes."""
    from mlflow.exceptions import MlflowException

    client = client or _client()
    fresh = gather(client, home, done.experiment, done.keep_last)  # refuses before anything is deleted
    removed, skipped, taken = [], [], []
    for item in done.items:
        try:
            with _held(item, home):  # the owner's lock first: nothing changes the item while it is judged
                item = _narrowed(item, fresh)
                reason = _still_kept(item, fresh, client)
                if reason is None:
                    before = stats(item)
                    _delete(item, client)
                    removed.append(item)
                    taken.append(before)
                    continue
        except (Busy, OutsideFolder, OSError, MlflowException) as exc:
            reason = str(exc)
        log.warning("gc kept %s %s: %s", item.kind, item.ref, reason)
        skipped.append((item, reason))
    from foundry.runtime.env import uses_embedded_mlflow

    return Outcome(tuple(removed), tuple(skipped), freed(taken), uses_embedded_mlflow())


def _narrowed(item: Candidate, fresh: Kept) -> Candidate:
    """A cache item without the objects that a version kept since the plan lists."""
    if item.kind not in ("data version", "cache objects", "hydration cache"):
        return item
    protected = scan.protected_objects(item.root, set(fresh.data_versions))
    if protected is None:
        return Candidate(item.kind, item.ref, item.root, (), 0, item.why)  # unreadable: keep all of it
    paths = tuple(p for p in item.paths if p.parent.name + p.name.removesuffix(".dir") not in protected)
    return Candidate(item.kind, item.ref, item.root, paths, item.bytes, item.why, item.ids)


def _still_kept(item: Candidate, fresh: Kept, client) -> str | None:
    """Why the item must stay after all (None: it goes)."""
    referenced = {
        "data version": fresh.data_versions,
        "hydrated copy": fresh.data_versions,
        "hydration cache": fresh.data_versions,
        "run files": fresh.runs,
        "mlflow run": fresh.runs,
        "source mirror": fresh.sources,
        "model copy": fresh.model_folders,
    }.get(item.kind, ())
    if item.ref in referenced:
        return "referenced since the plan was made"
    if item.kind == "checkpoints" and newest_change(item.root / item.ref) * 1000 >= fresh.since_ms:
        return "changed since the plan was made"
    if item.kind == "mlflow run":
        run = client.get_run(item.ref)
        if run.info.status == "RUNNING" and not owner_gone(run.data.tags):
            return "running"
    if not item.paths and item.kind != "mlflow run":
        return "nothing left to delete"
    return None


@contextmanager
def _held(item: Candidate, home: Path) -> Iterator[None]:
    """The lock the item's owner takes, held without waiting: a busy item is skipped, not waited for."""
    from filelock import FileLock, Timeout

    with ExitStack() as stack:
        lock = None
        if item.kind in ("data version", "cache objects"):
            lock = FileLock(str(home / "workspace.lock"), timeout=0)  # `versioning._workspace_lock`
        elif item.kind == "source mirror":
            lock = FileLock(str(item.root / f"{item.ref}.lock"), timeout=0)  # `remote.locked`
        elif item.kind == "checkpoints":
            stack.enter_context(_flocked(item.root / f"{item.ref}.lock"))  # `resume.claimed`
        if lock is not None:
            try:
                stack.enter_context(lock)
            except Timeout:
                raise Busy(f"{lock.lock_file} is held: in use") from None
        yield


@contextmanager
def _flocked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Busy(f"{path} is held: training is running") from None
        yield


def _delete(item: Candidate, client) -> None:
    if item.kind == "mlflow run":
        if client.get_run(item.ref).info.lifecycle_stage != "deleted":
            client.delete_run(item.ref)  # soft: the run leaves every list; `mlflow gc` removes its record
        for model_id in item.ids:
            client.delete_logged_model(model_id)
    for path in item.paths:
        if path.is_dir() and not path.is_symlink():
            remove_tree(path, within=item.root)
        else:
            remove_file(path, within=item.root)


def table(items: tuple[Candidate, ...]) -> str:
    rows = [("kind", "what", "size", "why")]
    rows += [(i.kind, _short(i.ref), human(i.bytes), i.why) for i in items]
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}" for r in rows)


def _short(ref: str) -> str:
    return ref if len(ref) <= 32 else f"{ref[:16]}…"  # a data version whole; a run id (also 32) whole


def summary(done: Plan, outcome: Outcome | None = None) -> str:
    """What `foundry gc` prints and the flow's artifact holds: the table, then what was or would be reclaimed."""
    kept = ", ".join(f"{n} {what}" for what, n in done.kept.items())
    lines = [table(done.items) if done.items else "nothing to collect", ""]
    lines.append(f"kept: {kept} (registered versions, running flows, the last {done.keep_last} runs)")
    lines.append("the DVC remote is never touched: reproduce and hydrate pull every kept version from it")
    if outcome is None:
        lines.append(f"dry run: {len(done.items)} items, {human(done.bytes)} reclaimable; --apply deletes them")
        return "\n".join(lines)
    lines += [f"kept after all: {i.kind} {_short(i.ref)}: {why}" for i, why in outcome.skipped]
    lines.append(f"removed {len(outcome.removed)} items: {human(outcome.bytes)} reclaimed ({outcome.bytes} bytes)")
    if any(i.kind == "mlflow run" for i in outcome.removed):
        lines.append(
            "MLflow runs are soft-deleted; "
            + (
                "their artifacts in $FOUNDRY_HOME/mlflow/artifacts are freed"
                if outcome.mlflow_artifacts_freed
                else "the tracking server frees their artifacts when its operator runs `mlflow gc`"
            )
        )
    return "\n".join(lines)
