"""The locks that make concurrent runs safe: the promotion lock (a file lock per home) and the kernel-lock
manager of the dataset cache key. Across homes through a Prefect server: tests/slow/tasks/test_locks_prefect.py."""

from __future__ import annotations

import signal
import subprocess
import sys

from helpers_locks import holds_then_waits

from tasks.locks import FlockLockManager


def test_one_promotion_at_a_time_on_one_home(tmp_path):
    assert holds_then_waits(tmp_path, tmp_path, "lock-home") == ["A in", "A out", "B in"]


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
    and the lock stays with the process that took it (tests/slow/pipeline/test_airgap.py runs that pipeline)."""
    import pickle

    manager = FlockLockManager(tmp_path)
    assert manager.acquire_lock("key", "run-1")
    copy = pickle.loads(pickle.dumps(manager))
    assert copy.folder == tmp_path and not copy.is_lock_holder("key", "run-1")
    assert copy.is_locked("key") and not copy.acquire_lock("key", "run-2", acquire_timeout=0.3)
    manager.release_lock("key", "run-1")
    assert copy.acquire_lock("key", "run-2", acquire_timeout=5)


def test_the_promotion_lock_waits_a_bounded_time_for_a_prefect_server_that_refuses_then_names_it(tmp_path, monkeypatch):
    """Asked again while the server refuses (a restart), then an error naming the server and the lock; a server
    that comes back within the wait: tests/slow/ops/test_prefect_leases.py."""
    import socket
    import time

    import pytest
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tasks import locks

    monkeypatch.setenv(locks.SERVER_WAIT_VARIABLE, "1")  # what the slow tests set: the same path, shorter
    with socket.socket() as s:  # a port nothing listens on once closed: connections are refused
        s.bind(("127.0.0.1", 0))
        api = f"http://127.0.0.1:{s.getsockname()[1]}/api"
    started = time.monotonic()
    with temporary_settings({PREFECT_API_URL: api}), pytest.raises(ConnectionError) as refused:
        with locks.promotion_lock("away-gpt", tmp_path):
            pass
    took = time.monotonic() - started
    assert f"the Prefect server at {api} did not answer for 1 s" in str(refused.value)
    assert "'foundry-promote-away-gpt': nothing was judged or registered" in str(refused.value)
    assert 1 <= took < 8, took  # asked at 0 and 1 s (the next, at 3 s, would be past the wait)


def test_the_promotion_locks_wait_for_the_server_is_62_s_unless_the_operator_sets_another(monkeypatch):
    """The production default is Prefect's own client budget (2 + 4 + 8 + 16 + 32 s), the figure
    docs/operations.md gives; `FOUNDRY_PREFECT_WAIT_S` sets another, and a value that bounds nothing is refused."""
    import re

    import pytest

    from foundry.runtime.env import PROJECT_ROOT
    from tasks import locks

    monkeypatch.delenv(locks.SERVER_WAIT_VARIABLE, raising=False)
    assert locks.server_wait_s() == locks.SERVER_WAIT_S == 62.0
    documented = (PROJECT_ROOT / "docs" / "operations.md").read_text()
    assert re.search(r"`tasks\.locks\.SERVER_WAIT_S` \(62 s", documented)
    assert f"`{locks.SERVER_WAIT_VARIABLE}`" in documented
    monkeypatch.setenv(locks.SERVER_WAIT_VARIABLE, "5")
    assert locks.server_wait_s() == 5.0
    for wrong in ("0", "-3", "soon", "inf"):
        monkeypatch.setenv(locks.SERVER_WAIT_VARIABLE, wrong)
        with pytest.raises(ValueError, match=f"{locks.SERVER_WAIT_VARIABLE}="):
            locks.server_wait_s()
