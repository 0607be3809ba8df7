"""Map steps on this machine's cores: a pool of fresh worker processes, one core each, results in order.

Data preparation and its gate map over partitions of the corpus; on one machine these run here, with no
cluster and no Prefect server to start (`data.workers`; a Dask cluster only when `data.scheduler` names one).
The workers are spawned, not forked: the calling process may hold threads (Prefect's, torch's) and a
tokenizers thread pool that a forked child would inherit broken.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from foundry.core.forking import default_signals

# A worker is one core: one thread, and no library that spreads itself over more. Tokenizers keeps its
# (one-thread) pool rather than TOKENIZERS_PARALLELISM=false: encoding then runs off the calling thread
# without the GIL, which a Dask worker's own threads keep asking for (measured ~20% faster there).
ONE_CORE = {
    "RAYON_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "true",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}


def cores() -> int:
    """The cores this process may run on (its affinity: `taskset` and cgroups' cpusets narrow it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def worker_count(configured: int) -> int:
    """`data.workers` as a count: 0 means one a core."""
    return configured or cores()


def serial_map(step: Callable, jobs: list, each: Callable | None = None) -> list:
    return collected(jobs, map(step, jobs), each)


def collected(jobs: list, results: Iterable, each: Callable | None = None) -> list:
    """`results` (of `jobs`, in their order) as a list, `each(job, result)` called as each arrives."""
    kept = []
    for job, result in zip(jobs, results, strict=True):
        if each is not None:
            each(job, result)
        kept.append(result)
    return kept


@contextmanager
def environment_kept() -> Iterator[None]:
    """This process's environment as it was on entry, once the block ends: around starting workers that need
    variables of their own (or, as Dask's nanny does, write variables into their parent's for good)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def process_map(workers: int) -> Iterator[Callable[..., list]]:
    """A mapper over `workers` worker processes (in this process for 1): `mapper(step, jobs, each=None)` runs the
    module-level function `step` on each job and returns the results in the jobs' order, calling `each(job, result)`
    here as each comes back; the first failure raises here. Leaving the block stops the workers, whatever happened.
    The workers are spawned: a script that calls this keeps its top level under `if __name__ == "__main__":`."""
    if workers <= 1:
        yield serial_map
        return
    context = multiprocessing.get_context("spawn")
    with environment_kept():  # the workers inherit one core's variables before any library reads them at import
        os.environ.update(ONE_CORE)
        pool = context.Pool(workers, initializer=default_signals)  # Ctrl-C: the caller stops the pool
    try:
        yield lambda step, jobs, each=None: collected(jobs, pool.imap(step, jobs), each)
    finally:
        pool.terminate()
        pool.join()
