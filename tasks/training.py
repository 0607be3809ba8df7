"""Stages B-D as a Prefect task: training that a retry, or a re-run after a crash, resumes exactly."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig, TrainConfig
from foundry.core.contracts import DataVersion, Replay, RunContext
from foundry.runtime import tracking


@dataclass(frozen=True)
class Training:
    """What the train task trains: `config` on the prepared folder `data_dir` of the data version `data`, for the
    flow's run `run`. `resume=False` (reproduction) trains from scratch, whatever earlier attempts left behind;
    `replay`: the pretraining data an alignment run (SFT or DPO) replays windows of (`align.replay_fraction`)."""

    config: FoundryConfig
    data_dir: Path
    data: DataVersion
    run: RunContext
    resume: bool = True
    replay: Replay | None = None


def train(job: Training) -> Path:
    """The train task with `train.retries` Prefect retries; each retry resumes from the last checkpoint."""
    retried = train_task.with_options(
        retries=job.config.train.retries, retry_delay_seconds=5, retry_condition_fn=unless_the_input_is_wrong
    )
    return retried(job)


def unless_the_input_is_wrong(task, task_run, state) -> bool:
    """Retry a crash (a rank killed, a disk or a service failing): the retry resumes from the last checkpoint.
    Not an error in what the run was given (a config, a parent of other settings: ValueError, TypeError), which a
    retry would only repeat after the same setup, nor a preemption (SIGTERM), which asked the run to stop."""
    from foundry.runtime.preemption import Preempted

    return not isinstance(state.result(raise_on_failure=False), (ValueError, TypeError, Preempted))


@task(name="train", cache_policy=NO_CACHE)
def train_task(job: Training) -> Path:
    """Lightning training; metrics stream to the flow's MLflow run, and its energy is recorded on it
    (`foundry.energy`: `energy/train/joules` and per unit trained).

    Unfinished training lives under a key of config and data versions (the replayed one too), so a retry, or
    a re-run of the same command after a crash, resumes it; finished, it moves to this run's folder.
    `resume=False` (reproduction) trains from scratch in this run's own folder, whatever earlier attempts
    left behind."""
    from foundry.checkpointing.manifest import LAST, MANIFEST
    from foundry.checkpointing.resume import attempt_dir, claimed, finish_attempt
    from foundry.core.energy import read_units
    from foundry.energy.tracked import measured
    from foundry.export.peft import PEFT_ADAPTER
    from foundry.training.launch import launch_with
    from foundry.training.progress import PROGRESS_FILE
    from tasks.artifacts import training_progress

    config, run, replay = job.config, job.run, job.replay
    own = run.dir / "checkpoints"
    attempt = attempt_dir(run.home, config, job.data.data_version, replay) if job.resume else own
    t = config.train
    with claimed(attempt):
        with training_progress(attempt / PROGRESS_FILE, t.max_steps, t.progress_every_s), system_metrics(run, t):
            with measured(run, "train", config.energy, units=lambda: read_units(attempt)):
                launch_with(config, job.data_dir, attempt, run.run_id, job.data, replay)
        checkpoints = finish_attempt(attempt, own) if attempt != own else own
    for name in (LAST, MANIFEST):  # each once, at the end: no copy per save
        tracking.log_artifact(run.run_id, checkpoints / name, "checkpoints")
    if (checkpoints / "adapter.pt").is_file():  # LoRA: the adapters alone, beside the model they are merged into
        tracking.log_artifact(run.run_id, checkpoints / "adapter.pt", "adapter")
        if (checkpoints / PEFT_ADAPTER).is_dir():  # the same adapters in PEFT's format, for the HF export of the base
            tracking.log_artifact(run.run_id, checkpoints / PEFT_ADAPTER, "adapter")
    return checkpoints / "model.pt"


@contextmanager
def system_metrics(run: RunContext, t: TrainConfig) -> Iterator[None]:
    """MLflow's system metrics (CPU, memory, disk, network; GPU when present) on the run while training runs,
    sampled every `train.progress_every_s` seconds and once more at the end."""
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    monitor = SystemMetricsMonitor(run.run_id, sampling_interval=t.progress_every_s, resume_logging=True)
    monitor.start()
    try:
        yield
    finally:
        monitor.finish()
        # The monitor logs a sample only after waiting an interval, and drops it when stopped meanwhile: what
        # it took since its last log (all of a training shorter than one interval) is logged here.
        last = monitor.aggregate_metrics()
        if last:
            monitor.publish_metrics(last)
            monitor.mlflow_logger.flush()
