"""A search trial's training with the pipeline's own trainer: pruned from its validation reports, and the time
box. The space and the study's bookkeeping: tests/fast/search/test_search.py; the flow:
tests/slow/search/test_search_flow.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers_configs import tiny
from helpers_search import LR_ONLY, study_config
from optuna.trial import TrialState

from foundry.config import FoundryConfig
from foundry.search.study import (
    open_study,
    suggest,
    tell_outcome,
    trial_config,
)

# --- a trial's training ----------------------------------------------------------------------------


def _run(config: FoundryConfig, study, data_dir: Path, home: Path, parent: str):
    import mlflow

    from foundry.core.contracts import TrialData, TrialJob
    from foundry.search.records import start_trial_run
    from foundry.search.trial import run_trial

    trial = study.ask()
    trial_cfg = trial_config(config, suggest(trial, config.search))
    job = TrialJob(
        study_name=study.study_name,
        storage=config.search.storage,
        trial_id=trial._trial_id,
        number=trial.number,
        config=trial_cfg.model_dump(mode="json"),
        data=TrialData(data_version="v-search", remote="", data_dir=data_dir),
        run_id=start_trial_run(trial_cfg, study, trial, parent),
        checkpoint_dir=home / "trials" / str(trial.number),
        cores=[],
        tracking_uri=mlflow.get_tracking_uri(),
    )
    outcome = run_trial(job)
    tell_outcome(study, trial, outcome)
    return outcome, job


def test_a_clearly_worse_trial_is_pruned_from_its_validation_reports(tiny_dataset, tmp_path):
    from mlflow import MlflowClient

    from foundry.runtime import tracking

    config = study_config(
        tmp_path,
        LR_ONLY,
        "train.optimizer=adamw",  # one learning rate for every parameter: 1e-7 then learns nothing at all
        "search.baseline_first=false",
        "search.trial_max_steps=40",
        "search.val_every_n_steps=5",
        "search.pruner_startup_trials=1",
    )
    study, _ = open_study(config, tmp_path)
    study.enqueue_trial({"train.learning_rate": 0.01})
    study.enqueue_trial({"train.learning_rate": 1e-7})  # learns nothing: clearly worse from its first report
    parent = tracking.start_pipeline_run(config)
    good, good_job = _run(config, study, tiny_dataset, tmp_path, parent)
    bad, bad_job = _run(config, study, tiny_dataset, tmp_path, parent)

    assert (good.state, good.steps) == ("complete", 40)
    assert good.value == pytest.approx(good.metrics.bits_per_byte)
    assert bad.state == "pruned" and bad.pruned_at_step == bad.steps <= 10
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.PRUNED]
    assert study.trials[1].value > max(study.trials[0].intermediate_values.values())
    # The learning curve and the reports are on each trial's own run.
    client = MlflowClient()
    assert len(client.get_metric_history(good_job.run_id, "search/val_bits_per_byte")) == 8
    assert len(client.get_metric_history(good_job.run_id, "val/loss")) == 8
    assert "holdout/bits_per_byte" not in client.get_run(bad_job.run_id).data.metrics
    assert sorted(p.name for p in good_job.checkpoint_dir.iterdir()) == [
        "manifest.json",
        "model.pt",
        "trained_units.json",  # what the ranks processed, for the stage's joules per token (#59)
        "weights.rank0.sha256",
    ]


class TickingClock:
    """Reads `per_read` seconds later at every read, and `slow_read` once `slow` is set: a run of known speed."""

    def __init__(self, per_read: float, slow_read: float = 1.0):
        self.now, self.per_read, self.slow_read, self.slow = 0.0, per_read, slow_read, False

    def __call__(self) -> float:
        self.now += self.slow_read if self.slow else self.per_read
        return self.now


def _time_boxed(tmp_path, tiny_dataset, box):
    from foundry.search.callbacks import ValidationReporter
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    config = tiny("train.max_steps=100000", "checkpoint.every_n_steps=100000", "train.val_every_n_steps=100000")
    reporter = ValidationReporter(lambda step, value: False, 1.0)
    train(config, TrainingRun(tiny_dataset, tmp_path), progress=False, callbacks=(box, reporter))
    return config, reporter, torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=False)


def test_the_time_box_fits_the_length_and_ends_the_schedule_there(tiny_dataset, tmp_path):
    from foundry.search.callbacks import TimeBox

    box = TimeBox(seconds=1, clock=TickingClock(per_read=1 / 256))  # one read a step (binary-exact)
    config, reporter, last = _time_boxed(tmp_path, tiny_dataset, box)
    assert box.fitted_steps == 256  # the calibration steps count inside the box
    assert reporter.steps == last["global_step"] == box.fitted_steps
    floor = config.train.learning_rate * config.train.min_lr_ratio  # the cosine schedule reached its end
    assert last["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(floor, rel=1e-6)


def test_a_run_that_slows_down_after_fitting_stops_at_one_and_a_half_boxes(tiny_dataset, tmp_path):
    from foundry.search.callbacks import TimeBox

    class SlowsAfterFitting(TimeBox):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            self.clock.slow = self.fitted_steps is not None and trainer.global_step >= 50

    box = SlowsAfterFitting(seconds=1, clock=TickingClock(per_read=1 / 256, slow_read=0.25))
    _, reporter, last = _time_boxed(tmp_path, tiny_dataset, box)
    # 50 steps take 50/256 s, then a quarter second each: past 1.5 s at the 56th step, far short of 256.
    assert box.fitted_steps == 256 and reporter.steps == last["global_step"] == 56
