"""Progress as the orchestrator reads it: a small JSON file that a stage rewrites whole while it works.

Training's rank 0 (`foundry.training.progress`) and preparation (`foundry.data.progress`) each write one;
the Prefect task around the stage polls it for the run page and its periodic log lines
(`tasks.artifacts.reported_progress`), wherever the work itself runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Protocol, TypeVar


class Report(Protocol):
    """What a progress file holds: a dataclass that says how far along it is, and as one line."""

    @property
    def percent(self) -> float: ...

    def line(self) -> str: ...


R = TypeVar("R")


def percent_done(done: int, total: int) -> float:
    """How far along `done` of `total` is, in percent: never past 100, and 0 of a total of 0."""
    return 100.0 * min(done, total) / max(total, 1)


def seconds_left(elapsed_s: float, done: int, to_do: int) -> float | None:
    """`to_do` more at the pace `done` took `elapsed_s` at; None before anything is done (no pace yet)."""
    return None if done <= 0 else elapsed_s / done * to_do


def report_line(where: str, left: float | None) -> str:
    """A report's line: where it stands, then the seconds left when they are known."""
    return (where + ("" if left is None else f"{left:.0f} s left")).rstrip()


def write_report(path: Path | None, report: Report) -> None:
    if path is None:
        return
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(asdict(report)))
    os.replace(scratch, path)  # a reader never sees half a file


def read_report(path: Path, kind: type[R]) -> R | None:
    try:
        return kind(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):  # not written yet, or by another version
        return None
