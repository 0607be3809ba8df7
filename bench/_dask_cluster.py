"""Clusters that `bench/data_prep.py` starts before its clock: `start_cluster(kind, workers, folder)`.

- `*-warm`: a Dask LocalCluster in the measuring process whose workers have already run a small
  preparation (imports done);
- `dask-ext-*`: an external cluster as `data.scheduler` finds one: a `dask scheduler` process and one
  `dask worker` process (nanny and worker) per worker, on loopback, cold (nothing imported yet).

Each start returns the scheduler's address and a `stop` that shuts the cluster down and waits for
its processes, so that `RUSAGE_CHILDREN` of the measuring process covers them afterwards; for the
external cluster `stop` also returns the peak RSS of each of its processes (by `os.wait4`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

Stop = Callable[[], dict]


def start_cluster(kind: str, workers: int, folder: Path) -> tuple[str, Stop]:
    """('', a no-op) for kinds that start nothing before the clock."""
    if kind.endswith("-warm"):
        cluster = _warm_cluster(workers)
        return cluster.scheduler_address, lambda: cluster.close() or {}
    if kind.startswith("dask-ext-"):
        return _external_cluster(workers, folder)
    return "", dict


def _warm_cluster(workers: int):
    from distributed import LocalCluster

    from foundry.config import load_config
    from foundry.data.acquire import acquire_source
    from tasks.data_parallel import WORKER_ENV, environment_kept, run_prepare

    with environment_kept():
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            env=WORKER_ENV,
        )
    overrides = ["data.source=stdlib://json", f"data.scheduler={cluster.scheduler_address}", "model.block_size=8"]
    config = load_config(None, [*overrides, f"data.workers={workers}"])
    warm = Path(tempfile.mkdtemp())
    run_prepare(acquire_source(config.data, warm / "m.json"), config, warm / "prepared", progress=False)
    return cluster


def _external_cluster(workers: int, folder: Path) -> tuple[str, Stop]:
    """`dask scheduler` + `workers` x `dask worker`, with the environment the pipeline gives its
    LocalCluster's workers (one core each, quiet logs, no profiler) on top of this process's (its
    FOUNDRY_HOME and PREFECT_API_URL), and the Dask config README.md asks of an existing cluster's workers
    (nothing of the nanny's variables); returns once every worker has connected."""
    import yaml
    from dask.config import get as dask_config
    from distributed import Client

    from tasks.data_parallel import PRE_SPAWN_ENV, WORKER_ENV

    folder.mkdir(parents=True, exist_ok=True)
    dask, file = str(Path(sys.executable).with_name("dask")), folder / "scheduler.json"
    (folder / "dask-config").mkdir()
    nothing = {"distributed": {"nanny": {"pre-spawn-environ": dict.fromkeys(dask_config(PRE_SPAWN_ENV))}}}
    (folder / "dask-config" / "workers.yaml").write_text(yaml.safe_dump(nothing))
    env = {**os.environ, **WORKER_ENV, "DASK_CONFIG": str(folder / "dask-config")}
    scheduler = _spawn(
        [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(file), "--no-dashboard"],
        folder / "scheduler.log",
        env,
    )
    procs = {"scheduler": scheduler}
    stop = lambda: _stop(procs)  # noqa: E731
    try:
        _wait_for_file(file, scheduler, folder / "scheduler.log")
        for i in range(workers):
            command = [dask, "worker", "--scheduler-file", str(file), "--host", "127.0.0.1", "--nthreads", "1"]
            command += ["--nworkers", "1", "--memory-limit", "0", "--no-dashboard"]
            command += ["--local-directory", str(folder / f"worker{i}")]
            procs[f"worker{i}"] = _spawn(command, folder / f"worker{i}.log", env)
        with Client(scheduler_file=str(file), timeout="60s") as client:
            client.wait_for_workers(workers, timeout=180)
        return json.loads(file.read_text())["address"], stop
    except BaseException:
        stop()
        raise


def _spawn(command: list[str], log: Path, env: dict) -> subprocess.Popen:
    with open(log, "wb") as out:  # a file, not a pipe nobody reads: a full pipe would stall the process
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent)


def _wait_for_file(file: Path, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"dask scheduler did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def _stop(procs: dict[str, subprocess.Popen]) -> dict:
    """SIGTERM (the CLI then closes its nannies, which join their workers), workers before the
    scheduler; waits for each by `os.wait4` for its peak RSS (its own or its waited children's)."""
    peaks = {}
    workers = [name for name in procs if name != "scheduler"]
    for group in (workers, ["scheduler"]):
        for name in group:
            if procs[name].returncode is None:
                procs[name].send_signal(signal.SIGTERM)
        for name in group:
            peaks[name] = _wait_peak_mb(procs[name])
    return {
        "rss_workers_mb": [peaks[name] for name in workers],
        "rss_scheduler_mb": peaks["scheduler"],
    }


def _wait_peak_mb(proc: subprocess.Popen, timeout: float = 60) -> float:
    if proc.returncode is not None:  # already reaped: its figure is in RUSAGE_CHILDREN only
        return 0.0
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.1)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait again
    return usage.ru_maxrss / 1024
