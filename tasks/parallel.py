"""Preparation on a Dask cluster: the partition steps of `prepare` as Prefect tasks on a Dask task runner.

`tasks.prepare.run_prepare` comes here when `data.workers` > 1 or `data.scheduler` is set. A Prefect
flow then runs `prepare` with a `DaskTaskRunner`: a local cluster of `data.workers` processes, one
task thread and single-threaded libraries each, or the existing scheduler at `data.scheduler`
(whose workers must see the same files). The map steps are task runs on the workers; the global
steps run in the flow's own process. The output is the same, byte for byte, for any number of workers.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE

from foundry.config import DataConfig, FoundryConfig
from tasks.prepare import prepare

# A worker is one core: one task thread, and no library that spreads itself over more. Tokenizers
# keeps its (one-thread) pool rather than TOKENIZERS_PARALLELISM=false: encoding then runs off the
# task thread without the GIL, which the worker's own threads keep asking for (measured ~20% faster).
ONE_CORE = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "true", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
# Dask's sampling profiler walks every thread's stack each 10 ms: pure overhead here.
WORKER_ENV = {**ONE_CORE, "DASK_LOGGING__DISTRIBUTED": "warning", "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}


@contextmanager
def environment_kept():
    """Around starting a LocalCluster. Dask's nanny writes its pre-spawn variables (OMP_NUM_THREADS=1,
    MALLOC_TRIM_THRESHOLD_...) into its own process's environment, for good, before it spawns a worker
    (distributed/nanny.py): every process the flow started later (training) inherited them."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def task_runner(data: DataConfig):
    from prefect_dask import DaskTaskRunner

    # Dask narrates every connection at INFO; its warnings and errors still come through.
    logging.getLogger("distributed").setLevel(logging.WARNING)
    if data.scheduler not in ("", "local"):
        return DaskTaskRunner(address=data.scheduler)
    return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs={
        "n_workers": data.workers, "threads_per_worker": 1, "processes": True,
        # Loopback and a free port: a fixed 8787 collides with any other cluster on the machine.
        "host": "127.0.0.1", "dashboard_address": "127.0.0.1:0",
        "env": WORKER_ENV,
    })


@task(cache_policy=NO_CACHE)
def partition_step(step: Callable, job):
    """One partition (or chunk) through one map step of `prepare`."""
    return step(job)


def dask_map(step: Callable, jobs: list) -> list:
    """`prepare`'s mapper: one task run per job on the flow's task runner, results in job order."""
    named = partition_step.with_options(name=step.__name__.replace("_", "-"))
    futures = named.map(unmapped(step), jobs)
    return [future.result() for future in futures]  # raises the first failure


@flow(name="prepare-data")
def prepare_data(source_manifest: Path, config: FoundryConfig, out_dir: Path) -> dict:
    """Clean, split and tokenize with the partition steps on the flow's Dask task runner."""
    manifest = json.loads(Path(source_manifest).read_text())
    return prepare(manifest, config, Path(out_dir), progress=False, mapper=dask_map, workers=config.data.workers)


def _api_url() -> str:
    """The Prefect API this process talks to: the configured one, or the temporary server it started."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.api_url)


def prepare_on_dask(source_manifest: dict, config: FoundryConfig, out_dir: Path) -> dict:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # The flow takes the manifest as a file: a large corpus would make a large flow-run parameter.
    manifest_path = out_dir.parent / f".{out_dir.name}.source_manifest.json"
    manifest_path.write_text(json.dumps(source_manifest))
    try:
        # Task runs travel to the workers with this process's settings. Without an API URL in them,
        # every worker would start a temporary Prefect server of its own (~15 s each) and record its
        # task runs there: name the server this process uses.
        with temporary_settings({PREFECT_API_URL: PREFECT_API_URL.value() or _api_url()}), environment_kept():
            return prepare_data.with_options(task_runner=task_runner(config.data))(manifest_path, config, out_dir)
    finally:
        manifest_path.unlink(missing_ok=True)
