"""Which process owns a pipeline run, so that a run whose process died is marked FAILED by the next one.

A killed process (`kill -9`, an out-of-memory kill, a lost machine) never reaches the `finally` that ends
its MLflow run: it stayed RUNNING forever and its staging folders stayed on disk. Each pipeline run now
records its host, process id and the process's start time; a later run on the same experiment marks a
RUNNING run FAILED only when it was started on this host by a process that no longer exists (the start
time tells a reused process id apart). A run started elsewhere, or by a live process, is never touched:
on a shared tracking server the host decides, since no process elsewhere can be checked from here.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

from foundry.core.fs import OutsideFolder, remove_tree
from foundry.core.run_tags import FAILURE, RunOwner

__all__ = [
    "SCRATCH",
    "mark_stale_runs",
    "owner_gone",
    "owner_tags",
    "remove_scratch",
]  # the tag keys too: what a test or a caller tags a run's owner with

log = logging.getLogger(__name__)

SCRATCH = ("prepared", "merged")  # a run's staging folders: moved into place when it succeeds, junk otherwise


def _started(pid: int) -> float:
    import psutil

    return psutil.Process(pid).create_time()


def owner_tags() -> dict[str, str]:
    """This process, as recorded on the runs it starts."""
    pid = os.getpid()
    return RunOwner(host=socket.gethostname(), pid=str(pid), started=f"{_started(pid):.3f}").as_tags()


def owner_gone(tags: dict[str, str]) -> bool:
    """Whether the process a run's tags name ran on this host and has ended. Runs without the tags (started
    before they existed, or by hand) and runs of other hosts are never judged gone."""
    import psutil

    owner = RunOwner.from_tags(tags)
    if owner.host != socket.gethostname() or not owner.pid.isdigit():
        return False
    try:
        started = _started(int(owner.pid))
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # exists, but not ours to inspect: alive as far as we can tell
        return False
    recorded = float(owner.started or started)
    return abs(started - recorded) > 1.0  # the id now belongs to another process


def remove_scratch(home: Path, run_id: str) -> None:
    """A failed run's staging folders under `runs/<run id>/`; its reports stay, they say why it failed.
    Never raises: it runs while another error is on its way out."""
    runs = home / "runs"
    for name in SCRATCH:
        folder = runs / run_id / name
        if not (folder.exists() or folder.is_symlink()):
            continue
        try:
            remove_tree(folder, within=runs)
        except (OSError, OutsideFolder) as exc:
            log.warning("could not remove %s: %s", folder, exc)


def mark_stale_runs(client, experiment_id: str, home: Path) -> list[str]:
    """Mark FAILED the RUNNING runs of the experiment whose process on this host has ended, and remove their
    scratch folders; returns their ids."""
    stale = []
    for run in client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=1000):
        if not owner_gone(run.data.tags):
            continue
        owner = RunOwner.from_tags(run.data.tags)
        reason = f"process {owner.pid} on {owner.host} ended without finishing the run (killed?)"
        client.set_tag(run.info.run_id, FAILURE, reason)
        client.set_terminated(run.info.run_id, "FAILED")
        remove_scratch(home, run.info.run_id)
        log.warning("marked MLflow run %s FAILED: %s", run.info.run_id, reason)
        stale.append(run.info.run_id)
    return stale
