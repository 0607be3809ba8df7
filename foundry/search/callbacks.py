"""Lightning callbacks a trial adds to the pipeline's own training: pruning reports and a time box."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from lightning.pytorch import Callback

if TYPE_CHECKING:
    from foundry.config.training import TrainConfig

LN2 = math.log(2)
SET_UP_STEPS = 5  # a run's first steps pay for compilation and warm caches


class ValidationReporter(Callback):
    """Hands each validation loss to `report` as bits per byte, comparable across tokenizers and contexts
    (nats per token / ln 2 x the holdout's tokens per byte); stops training when `report` answers prune."""

    def __init__(self, report: Callable[[int, float], bool], tokens_per_byte: float):
        self.report = report
        self.tokens_per_byte = tokens_per_byte
        self.curve: list[tuple[int, float]] = []
        self.pruned_at: int | None = None
        self.steps = 0

    def on_validation_end(self, trainer, pl_module) -> None:
        loss = trainer.callback_metrics.get("val/loss")
        if trainer.sanity_checking or loss is None:
            return
        step, value = trainer.global_step, float(loss) / LN2 * self.tokens_per_byte
        self.curve.append((step, value))
        if self.report(step, value) and self.pruned_at is None:
            self.pruned_at = step
            trainer.should_stop = True  # the loop ends after this step; train() still writes model.pt

    def on_train_end(self, trainer, pl_module) -> None:
        self.steps = trainer.global_step


class TimeBox(Callback):
    """Fits a run into `seconds`: its speed per row is measured over `calibration_steps` steps after the first
    `skip_steps` (which pay for set-up), then its length becomes the steps whose rows fit (`rows`: a step's rows,
    which a batch ramp grows), and the learning-rate schedule ends there too, as it would for a run of that length.
    A ramp's small batches cost more per row than whole ones (each step's fixed costs are shared by fewer rows), so
    a ramped run is fitted short of the box rather than past it. A run that slows down badly afterwards is stopped
    at 1.5 x the box. `clock` reads seconds (tests give it one that ticks per read)."""

    def __init__(
        self,
        seconds: float,
        calibration_steps: int = 20,
        skip_steps: int = SET_UP_STEPS,
        clock: Callable[[], float] = time.perf_counter,
        rows: Callable[[int], int] = lambda step: 1,
    ):
        self.seconds = seconds
        self.clock = clock
        self.calibration_steps = calibration_steps
        self.skip_steps = skip_steps
        self.rows = rows
        self.fitted_steps: int | None = None
        self._start = self._mark = 0.0

    @classmethod
    def for_training(cls, seconds: float, train: TrainConfig) -> TimeBox:
        """A box that counts the rows of `train`'s batch ramp, if it has one."""
        from models.data import ramp_rows

        return cls(
            seconds,
            rows=partial(
                ramp_rows, batch_size=train.batch_size, ramp_steps=train.ramp_steps, first_rows=train.batch_ramp_rows
            ),
        )

    def on_train_start(self, trainer, pl_module) -> None:
        self._start = self.clock()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step, now = trainer.global_step, self.clock()
        if step == self.skip_steps and not self._mark:
            self._mark = now
        elif self.fitted_steps is None and self._mark and step >= self.skip_steps + self.calibration_steps:
            per_row = (now - self._mark) / sum(map(self.rows, range(self.skip_steps, step)))
            self.fitted_steps = max(step + 1, self._steps_that_fit(step, now, per_row, trainer.max_steps))
            trainer.fit_loop.epoch_loop.max_steps = self.fitted_steps
            # LitGPT's schedule reads its max_steps from hparams at every step.
            pl_module.hparams.max_steps = self.fitted_steps
        elif self.fitted_steps is not None and now - self._start > 1.5 * self.seconds:
            trainer.should_stop = True

    def _steps_that_fit(self, step: int, now: float, per_row: float, max_steps: int) -> int:
        left = self.seconds - (now - self._start)
        while step < max_steps and left >= per_row * self.rows(step):
            left -= per_row * self.rows(step)
            step += 1
        return step
