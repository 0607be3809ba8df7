"""One trial, on whichever worker runs it: the pipeline's own training (foundry.training.trainer.train) in
a fresh checkpoint folder, pruning reports to the study as it goes, then the pipeline's holdout metrics.

Everything it learns goes to its nested MLflow run: the learning curve (the trainer's own metrics plus
`search/val_bits_per_byte` at each report) and, unless pruned, the holdout metrics.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core import run_tags
from foundry.core import version_tags as tag
from foundry.core.contracts import TrialJob, TrialOutcome
from foundry.data.manifest import DatasetManifest
from foundry.runtime import tracking


def pin_threads(cores: list[int]) -> None:
    """Every thread of this process onto `cores`: a thread pool made earlier (torch's, by a previous trial
    on this worker) keeps the affinity it was born with unless moved too. Threads made later inherit it."""
    if not cores or not hasattr(os, "sched_setaffinity"):
        return
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def tokens_per_byte(data_dir: Path) -> float:
    manifest = DatasetManifest.read(data_dir)
    return manifest.holdout_tokens / manifest.holdout_bytes


def _reporter(job: TrialJob, search):
    """report(step, bits_per_byte) -> prune?, through the study's storage, as Optuna's pruners expect."""
    import optuna

    from foundry.search.study import build_pruner, open_storage

    study = optuna.load_study(
        study_name=job.study_name,
        storage=open_storage(job.storage),
        sampler=optuna.samplers.RandomSampler(),  # unused: the flow suggests; workers only report
        pruner=build_pruner(search),
    )
    trial = optuna.trial.Trial(study, job.trial_id)

    def report(step: int, value: float) -> bool:
        tracking.log_metrics(job.run_id, {"search/val_bits_per_byte": value}, step=step)
        if not math.isfinite(value):
            return True  # diverged: nothing to learn from the rest
        trial.report(value, step)
        return trial.should_prune()

    return report


def run_trial(job: TrialJob) -> TrialOutcome:
    import mlflow

    from foundry.core.workload import for_data
    from foundry.search.callbacks import TimeBox, ValidationReporter
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    pin_threads(job.cores)
    mlflow.set_tracking_uri(job.tracking_uri)
    tags = {tag.DATA_VERSION: job.data.data_version}
    if hasattr(os, "sched_getaffinity"):  # where it ran, as the kernel sees it
        tags[run_tags.SEARCH_CORES] = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    tracking.set_tags(job.run_id, tags)
    config = FoundryConfig.model_validate(job.config)
    data_dir = job.data.data_dir
    reporter = ValidationReporter(_reporter(job, config.search), tokens_per_byte(data_dir))
    callbacks = (reporter,)
    if config.search.trial_time_s:
        callbacks += (TimeBox.for_training(config.search.trial_time_s, config.train),)
    start = time.perf_counter()
    run = TrainingRun(data_dir, job.checkpoint_dir, job.run_id, job.data.data_version)
    model_pt = train(config, run, progress=False, callbacks=callbacks)
    seconds = time.perf_counter() - start
    for checkpoint in job.checkpoint_dir.glob("*.ckpt"):  # model.pt stays; a study's optimizer states would not fit
        checkpoint.unlink()
    common = {"number": job.number, "steps": reporter.steps, "train_seconds": seconds}
    tracking.log_metrics(job.run_id, {"search/steps": reporter.steps, "search/train_seconds": seconds})
    if reporter.pruned_at is not None:
        last = reporter.curve[-1][1]
        state = "pruned" if math.isfinite(last) else "diverged"
        return TrialOutcome(state=state, value=last, pruned_at_step=reporter.pruned_at, **common)
    metrics = for_data(data_dir).holdout_metrics(model_pt, data_dir / "tokenizer.json", data_dir, config)
    tracking.log_metrics(job.run_id, metrics.as_mlflow())
    value = metrics.bits_per_byte
    state = "complete" if math.isfinite(value) else "diverged"
    return TrialOutcome(state=state, value=value, metrics=metrics, **common)
