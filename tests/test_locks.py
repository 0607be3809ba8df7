"""The locks that make concurrent runs safe: the promotion lock (a file lock per home, and a global
concurrency limit on a Prefect server across homes) and the kernel-lock manager of the dataset cache key."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from tasks.locks import FlockLockManager, promotion_lock


def holds_then_waits(first_home, second_home, name: str) -> list[str]:
    """Thread A takes the lock and holds it 2 s; thread B, started meanwhile, must get it only after."""
    order, taken = [], threading.Event()

    def first():
        with promotion_lock(name, first_home):
            taken.set()
            order.append("A in")
            time.sleep(2)
            order.append("A out")

    def second():
        taken.wait()
        with promotion_lock(name, second_home):
            order.append("B in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return order


def test_one_promotion_at_a_time_on_one_home(tmp_path):
    assert holds_then_waits(tmp_path, tmp_path, "lock-home") == ["A in", "A out", "B in"]


@pytest.mark.slow  # starts a Prefect server
def test_with_a_prefect_server_one_promotion_at_a_time_across_homes(prefect_harness, tmp_path):
    """Two homes (two nodes): the file locks differ, the server's concurrency limit is shared."""
    assert holds_then_waits(tmp_path / "one", tmp_path / "two", "lock-server") == ["A in", "A out", "B in"]
    assert holds_then_waits(tmp_path / "one", tmp_path / "two", "lock-server") == ["A in", "A out", "B in"]


def test_the_cache_key_lock_is_released_when_its_holder_dies(tmp_path):
    manager = FlockLockManager(tmp_path / "locks")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from tasks.locks import FlockLockManager; "
            f"held = FlockLockManager(Path({str(tmp_path / 'locks')!r})); held.acquire_lock('key', 'other'); "
            "print('held', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    assert manager.is_locked("key") and not manager.acquire_lock("key", "me", acquire_timeout=0.5)
    holder.send_signal(signal.SIGKILL)  # no clean-up: Prefect's file-based manager would stay locked for good
    holder.wait(10)
    assert manager.acquire_lock("key", "me", acquire_timeout=10) and manager.is_lock_holder("key", "me")
    manager.release_lock("key", "me")
    assert not manager.is_locked("key")


def test_a_copy_of_the_lock_manager_holds_no_lock_and_the_original_keeps_its_own(tmp_path):
    """The manager travels with the `dataset` task's context to Dask workers (`data.workers` > 1): it pickles,
    and the lock stays with the process that took it (tests/test_airgap.py runs that pipeline)."""
    import pickle

    manager = FlockLockManager(tmp_path)
    assert manager.acquire_lock("key", "run-1")
    copy = pickle.loads(pickle.dumps(manager))
    assert copy.folder == tmp_path and not copy.is_lock_holder("key", "run-1")
    assert copy.is_locked("key") and not copy.acquire_lock("key", "run-2", acquire_timeout=0.3)
    manager.release_lock("key", "run-1")
    assert copy.acquire_lock("key", "run-2", acquire_timeout=5)
