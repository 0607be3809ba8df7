"""Training progress as people see it: a bar on a terminal, and a small file that the orchestrator polls.

Rank 0 writes `progress.json` next to the checkpoints (`foundry.runtime.progress`, at most every few seconds); the Prefect
task reads it for the run page's progress artifact and its periodic log lines, whether training runs in
its own process or as ranks under the elastic agent.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from lightning.pytorch.callbacks import Callback

from foundry.runtime.progress import percent_done, read_report, report_line, seconds_left, write_report

PROGRESS_FILE = "progress.json"


@dataclass(frozen=True)
class Progress:
    """Where training stands: optimizer steps done of the total, the latest loss and throughput (`unit`/s: tokens
    for a language model, images for a classifier; the field keeps its first name so older files still read)."""

    step: int
    total: int
    loss: float
    tokens_per_sec: float
    elapsed_s: float
    first_step: int = 0  # where this attempt started (a resumed run counts on from its checkpoint)
    unit: str = "tokens"

    @property
    def percent(self) -> float:
        return percent_done(self.step, self.total)

    @property
    def seconds_left(self) -> float | None:
        return seconds_left(self.elapsed_s, self.step - self.first_step, self.total - self.step)

    def line(self) -> str:
        loss = "?" if math.isnan(self.loss) else f"{self.loss:.4f}"
        where = f"step {self.step}/{self.total} ({self.percent:.0f}%)  loss {loss}  "
        return report_line(where + f"{self.tokens_per_sec:,.0f} {self.unit}/s  ", self.seconds_left)


def read_progress(path: Path) -> Progress | None:
    return read_report(path, Progress)


class ProgressReport(Callback):
    """Rank 0 only: `path` (when given) every `every_s` seconds and at the end; a tqdm bar when `bar`."""

    def __init__(self, path: Path | None, bar: bool, every_s: float = 2.0):
        self.path, self.bar, self.every_s = path, bar, every_s
        self._tqdm = None
        self._start = self._written = 0.0
        self._first = self._last = 0

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.global_rank != 0:
            return
        self._start, self._first = time.perf_counter(), trainer.global_step
        self._last = trainer.global_step
        if self.bar:
            from tqdm import tqdm

            self._tqdm = tqdm(total=trainer.max_steps, initial=self._first, desc="train", unit="step", mininterval=1)
        write_report(self.path, self._snapshot(trainer, pl_module))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if trainer.global_rank != 0 or step == self._last:
            return  # another rank, or a micro-batch of gradient accumulation
        snapshot = self._snapshot(trainer, pl_module)
        if self._tqdm is not None:
            self._tqdm.update(step - self._last)
            self._tqdm.set_postfix_str(
                f"loss {snapshot.loss:.4f}, {snapshot.tokens_per_sec:,.0f} {snapshot.unit}/s", refresh=False
            )
        self._last = step
        if time.perf_counter() - self._written >= self.every_s or step >= trainer.max_steps:
            write_report(self.path, snapshot)
            self._written = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_rank != 0:
            return
        write_report(self.path, self._snapshot(trainer, pl_module))
        if self._tqdm is not None:
            self._tqdm.close()

    def _snapshot(self, trainer, pl_module) -> Progress:
        metrics = trainer.callback_metrics
        unit = getattr(pl_module, "throughput_unit", "tokens")  # LitVision counts images
        return Progress(
            step=trainer.global_step,
            total=trainer.max_steps,
            loss=float(metrics.get("train/loss", math.nan)),
            tokens_per_sec=float(metrics.get(f"train/{unit}_per_sec", 0.0)),
            elapsed_s=time.perf_counter() - self._start,
            first_step=self._first,
            unit=unit,
        )
