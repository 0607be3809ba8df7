"""Preparation's progress for the orchestrator: files cleaned of the total, documents read, then each later step.

`prepare` writes it (`foundry.runtime.progress`) as training's rank 0 writes its own, and the Prefect task polls it
for periodic log lines. Files are counted as they are cleaned when the partitions run in this process; on
Dask the count moves when all partitions are done.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from foundry.runtime.progress import percent_done, read_report, report_line, seconds_left, write_report

PREPARE_PROGRESS = "prepare-progress.json"


@dataclass(frozen=True)
class Preparation:
    """Where preparation stands: its step, source files cleaned of the total, documents read so far."""

    step: str
    files: int
    total: int
    documents: int
    elapsed_s: float

    @property
    def percent(self) -> float:
        return percent_done(self.files, self.total)

    @property
    def seconds_left(self) -> float | None:
        return seconds_left(self.elapsed_s, self.files, self.total - self.files)

    def line(self) -> str:
        where = f"prepare: {self.step}, {self.files}/{self.total} files cleaned ({self.percent:.0f}%)  "
        return report_line(
            where + f"{self.documents:,} documents  ", self.seconds_left if self.step == "cleaning" else None
        )


def read_preparation(path: Path) -> Preparation | None:
    return read_report(path, Preparation)


@dataclass
class PrepareProgress:
    """Counts what is cleaned and writes `path` (when given) at most every `every_s` seconds, and at each step."""

    path: Path | None
    total: int
    every_s: float = 2.0
    files: int = 0
    documents: int = 0
    step: str = "cleaning"
    started: float = field(default_factory=time.monotonic)
    written: float = -float("inf")

    def cleaned(self, files: int, documents: int) -> None:
        self.files, self.documents = self.files + files, self.documents + documents
        if time.monotonic() - self.written >= self.every_s:
            self.report()

    def reached(self, step: str, files: int | None = None, documents: int | None = None) -> None:
        """A new step: reported at once (`files` and `documents` when the counting happened elsewhere)."""
        self.step = step
        self.files = self.files if files is None else files
        self.documents = self.documents if documents is None else documents
        self.report()

    def report(self) -> None:
        self.written = time.monotonic()
        now = Preparation(self.step, self.files, self.total, self.documents, self.written - self.started)
        write_report(self.path, now)
