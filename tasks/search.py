"""Hyperparameter search as Prefect tasks: each trial a task run on a Dask worker, the study driven here.

The flow's process asks the study for a trial, creates its nested MLflow run and submits it; a worker
(one of `search.workers` processes of a local cluster, or of the scheduler at `search.scheduler`) trains
it pinned to its share of the cores and reports validation to the study, which may prune it; the result
is told to the study here. At most `search.workers` trials run at once.
"""

from __future__ import annotations

import logging
import os
import re
import time

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import ConfigError, FoundryConfig
from foundry.config.search import SearchConfig
from foundry.core.contracts import RunContext, SearchResult, TrialData, TrialJob, TrialOutcome
from foundry.runtime.env import TELEMETRY_OFF
from tasks.data_parallel import WORKER_ENV, started

# Training sets its own thread count from the cores it is pinned to: only Dask's own settings here (and none
# of the nanny's: `started`).
SEARCH_WORKER_ENV = {k: v for k, v in WORKER_ENV.items() if k.startswith("DASK_")}


@task(name="trial", cache_policy=NO_CACHE)
def trial_task(job: TrialJob) -> TrialOutcome:
    """Train one trial with the pipeline's training code; report to the study; evaluate on the holdout."""
    os.environ.update(TELEMETRY_OFF)  # a worker of an existing cluster did not start from our entry points
    from foundry.search.trial import run_trial

    return run_trial(job)


def search_runner(search: SearchConfig):
    from prefect_dask import DaskTaskRunner

    logging.getLogger("distributed").setLevel(logging.WARNING)
    if search.scheduler:
        return DaskTaskRunner(address=search.scheduler)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": search.workers,
            "threads_per_worker": 1,  # one trial per worker at a time
            "processes": True,
            "host": "127.0.0.1",
            "dashboard_address": "127.0.0.1:0",
            "env": SEARCH_WORKER_ENV,
        },
    )


def _next_job(config: FoundryConfig, study, datasets: dict[str, TrialData], run: RunContext, cores: list[int]):
    """Ask the study for a trial; (trial, job), or (trial, None) when its config is invalid (told failed)."""
    import mlflow

    from foundry.search.records import start_trial_run
    from foundry.search.study import data_key, study_dir, suggest, tell_failed, trial_config

    trial = study.ask()
    try:
        trial_cfg = trial_config(config, suggest(trial, config.search))
    except ConfigError as exc:
        get_run_logger().warning("trial %d: invalid config, not trained: %s", trial.number, exc)
        tell_failed(study, trial, f"invalid: {exc}")
        return trial, None
    run_id = start_trial_run(trial_cfg, study, trial, run.run_id)
    job = TrialJob(
        study_name=study.study_name,
        storage=_storage(config),
        trial_id=trial._trial_id,
        number=trial.number,
        config=trial_cfg.model_dump(mode="json"),
        data=datasets[data_key(trial_cfg)],
        run_id=run_id,
        checkpoint_dir=study_dir(run.home, config.search) / "trials" / str(trial.number),
        cores=cores,
        tracking_uri=mlflow.get_tracking_uri(),
    )
    return trial, job


def _storage(config: FoundryConfig) -> str:
    from foundry.runtime.env import foundry_home
    from foundry.search.study import storage_url

    return storage_url(foundry_home(), config.search)


def _finish(study, trial, job: TrialJob, future) -> Exception | None:
    """Tell the study how a trial ended; an error is returned, to stop the search once the others finish."""
    from foundry.search.records import end_trial_run
    from foundry.search.study import tell_failed, tell_outcome

    try:
        outcome: TrialOutcome = future.result()
    except Exception as exc:
        tell_failed(study, trial, f"error: {type(exc).__name__}: {exc}")
        end_trial_run(job.run_id, "error", ok=False)
        return RuntimeError(f"trial {job.number} failed ({type(exc).__name__}): {exc}")
    tell_outcome(study, trial, outcome)
    end_trial_run(job.run_id, outcome.state, ok=outcome.state != "diverged")
    get_run_logger().info(
        "trial %d %s: %.4f bits per byte, %d steps", job.number, outcome.state, outcome.value, outcome.steps
    )
    return None


def run_trials(config: FoundryConfig, study, datasets: dict[str, TrialData], run: RunContext) -> None:
    """Trials until the budget is spent (`search.n_trials` over every run of the study, `search.timeout_s`
    for this one), at most `search.workers` at a time. A trial that raises stops the search, after the
    running ones are told: the study keeps them, and re-running the command continues it."""
    from distributed import wait
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from foundry.search.study import core_shares, spent
    from tasks.data_parallel import _api_url

    search = config.search
    shares = [[] for _ in range(search.workers)] if search.scheduler else core_shares(search.workers)
    deadline = time.monotonic() + search.timeout_s if search.timeout_s else float("inf")
    free, running, failure = list(range(search.workers)), {}, None

    def may_start() -> bool:
        within = not search.n_trials or spent(study) + len(running) < search.n_trials
        return bool(free) and failure is None and within and time.monotonic() < deadline

    if not may_start():  # the budget was spent by earlier runs: no cluster to start
        return
    # Task runs travel to the workers with this process's settings: name the Prefect server it uses.
    with temporary_settings({PREFECT_API_URL: PREFECT_API_URL.value() or _api_url()}):
        with started(search_runner(search)) as runner:
            while True:
                while may_start():
                    slot = free.pop(0)
                    trial, job = _next_job(config, study, datasets, run, shares[slot])
                    if job is None:
                        free.insert(0, slot)
                        continue
                    future = runner.submit(trial_task.with_options(name=f"trial-{job.number}"), {"job": job})
                    running[future.wrapped_future] = (future, trial, job, slot)
                if not running:
                    break
                with runner.client.as_current():  # `wait` finds the cluster's client as the current one
                    done, _ = wait(list(running), return_when="FIRST_COMPLETED")
                for key in done:
                    future, trial, job, slot = running.pop(key)
                    free.append(slot)
                    failure = _finish(study, trial, job, future) or failure
    if failure is not None:
        raise failure


@task(name="record-study", cache_policy=NO_CACHE)
def record(config: FoundryConfig, study, run: RunContext) -> SearchResult:
    """The study's table, plots and best config on its MLflow run; the same table as a Prefect artifact."""
    from prefect.artifacts import create_table_artifact

    from foundry.search.records import record_study

    result, rows = record_study(config, study, run)
    key = "search-" + re.sub(r"[^a-z0-9]+", "-", study.study_name.lower()).strip("-")
    best = (
        f"best: trial {result.best_number}, {result.best_value:.4f} bits per byte"
        if result.best_config
        else "no trial completed"
    )
    create_table_artifact(rows, key=key, description=f"Study {study.study_name}: {len(rows)} trials; {best}.")
    return result
