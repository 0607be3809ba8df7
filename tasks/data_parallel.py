"""Preparation on this machine's cores or on a Dask cluster: the map steps of `prepare` as Prefect tasks there.

`run_prepare` runs `foundry.pretrain.prepare.prepare` in this process, its map steps on `data.workers` worker
processes of this machine (0: one a core; 1: all in this process) when no `data.scheduler` is set. With one, its map
steps are Prefect task runs on a `DaskTaskRunner`: a local cluster of `data.workers` processes (`local`), one task
thread and single-threaded libraries each, or the existing scheduler at that address (whose workers must see the
same files). The global steps run in this process. The output is the same, byte for byte, for any number of workers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from prefect import task, unmapped
from prefect.cache_policies import NO_CACHE

from foundry.config import DataConfig, FoundryConfig
from foundry.core import workload
from foundry.core.contracts import SourceManifest
from foundry.core.preparing import FRESH, DataBasis, Mapper, PrepareRun, Preparing
from foundry.core.process_pool import ONE_CORE, collected, environment_kept, process_map, worker_count
from foundry.data.prepared import Prepared
from foundry.runtime.env import TELEMETRY_OFF

# Dask's sampling profiler walks every thread's stack each 10 ms: pure overhead here.
WORKER_ENV = {**ONE_CORE, "DASK_LOGGING__DISTRIBUTED": "warning", "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}
# What Dask's nanny adds to a worker's environment before it starts it. Its MALLOC_TRIM_THRESHOLD_ makes glibc hand
# freed memory back eagerly: cleaning the default corpus took 1.13x as long (bench/README.md, data preparation),
# a training step 1.2x (bench/worker_env.py).
PRE_SPAWN_ENV = "distributed.nanny.pre-spawn-environ"


def nanny_adds_nothing() -> dict:
    """Dask config under which a local cluster's nannies start workers with the environment they are given."""
    import dask
    import distributed  # noqa: F401  (importing it registers its config, the nanny's variables among it)

    return {f"{PRE_SPAWN_ENV}.{name}": None for name in dask.config.get(PRE_SPAWN_ENV)}


@contextmanager
def started(runner):
    """A DaskTaskRunner, entered: a local cluster's workers get this process's environment and the runner's `env`,
    and nothing of the nanny's; the environment of this process is the same afterwards."""
    import dask

    # Dask's nanny writes its pre-spawn variables (OMP_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_...) into its own
    # process's environment, for good, before it spawns a worker (distributed/nanny.py): every process the flow
    # started later (training) inherited them.
    with environment_kept(), dask.config.set(nanny_adds_nothing()), runner:
        yield runner


def task_runner(data: DataConfig):
    from prefect_dask import DaskTaskRunner

    # Dask narrates every connection at INFO; its warnings and errors still come through.
    logging.getLogger("distributed").setLevel(logging.WARNING)
    if data.scheduler not in ("", "local"):
        return DaskTaskRunner(address=data.scheduler)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": worker_count(data.workers),
            "threads_per_worker": 1,
            "processes": True,
            # Loopback and a free port: a fixed 8787 collides with any other cluster on the machine.
            "host": "127.0.0.1",
            "dashboard_address": "127.0.0.1:0",
            "env": WORKER_ENV,
        },
    )


@task(cache_policy=NO_CACHE)
def partition_step(step: Callable, job):
    """One partition (or chunk) through one map step of `prepare`."""
    # A worker of an existing cluster (`data.scheduler`) was started by someone else: no entry point
    # of ours turned its telemetry off.
    os.environ.update(TELEMETRY_OFF)
    return step(job)


def dask_mapper(runner) -> Mapper:
    """`prepare`'s mapper: one task run per job on `runner`, results in job order."""

    def dask_map(step: Callable, jobs: list, each: Callable | None = None) -> list:
        named = partition_step.with_options(name=step.__name__.replace("_", "-"))
        futures = runner.map(named, {"step": unmapped(step), "job": jobs})
        return collected(jobs, (future.result() for future in futures), each)  # raises the first failure

    return dask_map


def _api_url() -> str:
    """The Prefect API this process talks to: the configured one, or the temporary server it started."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.api_url)


def run_prepare(
    source_manifest: SourceManifest,
    config: FoundryConfig,
    out_dir: Path,
    progress: bool = True,
    basis: DataBasis = FRESH,
    progress_file: Path | None = None,
) -> Prepared:
    """`prepare` with its map steps in this process, on this machine's worker processes (no `data.scheduler`:
    nothing to start but the processes) or on Dask. Either way the output is the same, byte for byte.
    `basis` as `prepare` takes it (the ledger to build on, the replay share, the documents a purge removed);
    `progress_file`: where it reports its progress. The workload `data.modality` names
    prepares it; one whose map steps cannot run on workers (images) always in this process."""
    work = workload.for_config(config)
    workers = worker_count(config.data.workers) if work.prepares_on_workers else 1
    if not (work.prepares_on_workers and config.data.scheduler):
        with process_map(workers) as mapper:
            running = PrepareRun(mapper, workers, progress_file)
            return work.prepare(Preparing(source_manifest, config, out_dir, basis, progress, running))
    from prefect.settings import PREFECT_API_URL, temporary_settings

    # Task runs travel to the workers with this process's settings. Without an API URL in them,
    # every worker would start a temporary Prefect server of its own (~15 s each) and record its
    # task runs there: name the server this process uses.
    with (
        temporary_settings({PREFECT_API_URL: PREFECT_API_URL.value() or _api_url()}),
        started(task_runner(config.data)) as runner,
    ):
        running = PrepareRun(dask_mapper(runner), workers, progress_file)
        return work.prepare(Preparing(source_manifest, config, out_dir, basis, progress=False, running=running))
