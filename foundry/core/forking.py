"""Forking a process that holds a large heap (torch, Lightning, Prefect imported): the children's garbage collections
leave the parent's objects alone (`frozen_heap`), and a child that calls `default_signals` does not run the parent's
SIGTERM and SIGINT handlers.

A forked child shares the parent's memory until it writes a page. Its first full collection walks every object it
inherited and writes to each one's header, so it copies most of the parent's heap and spends the time to do so:
~0.3 s of each image worker's start in a process with torch and Lightning imported (bench/README.md, the vision
section). Python's documentation advises `gc.freeze()` right before such a fork; the parent's heap is thawed once
the children are started, and they keep theirs frozen.
"""

from __future__ import annotations

import gc
import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Within the block, the objects this process holds are out of its collections' reach, and so out of those of the
    children it forks there."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def default_signals(_worker_id: int | None = None) -> None:
    """In a forked worker (a pool's initializer, a DataLoader's `worker_init_fn`): SIGTERM ends it, and SIGINT is left
    to the parent. A flow process's handlers came with the fork: Prefect's raised its TerminationSignal in the worker
    a pool ends with SIGTERM, and 4 of 7 image runs here logged its traceback."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
