"""Locks that make concurrent runs safe: the dataset cache key and the promotion of a model.

- `FlockLockManager`: Prefect's lock-manager protocol on kernel file locks, for the `dataset` task's cache
  isolation (SERIALIZABLE): a second run with the same cache key waits for the first and then reads its
  result instead of preparing the data again. Prefect's own `FileSystemLockManager` writes a lock file
  that a killed process leaves behind for good; the kernel releases a `flock` when its holder dies.
- `promotion_lock`: one flow at a time judges and promotes a given model. A file lock under
  `$FOUNDRY_HOME/locks/` covers every process using that home (one node, or a shared file system); with a
  Prefect server configured, a global concurrency limit of one on that server covers every worker of it.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

POLL_S = 0.2


class FlockLockManager:
    """Locks by key, one file each under `folder`; `hold_timeout` is not needed: death releases them."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._held: dict[str, tuple[str, IO]] = {}

    def __reduce__(self):
        # Sent along with the `dataset` task's context when its map steps run on Dask workers: a lock belongs
        # to the process that took it (its open file), so the copy holds none.
        return (FlockLockManager, (self.folder,))

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.lock"

    def acquire_lock(
        self, key: str, holder: str, acquire_timeout: float | None = None, hold_timeout: float | None = None
    ) -> bool:
        if self.is_lock_holder(key, holder):
            return True
        self.folder.mkdir(parents=True, exist_ok=True)
        handle = open(self._path(key), "a")
        deadline = None if acquire_timeout is None else time.monotonic() + acquire_timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    handle.close()
                    return False
                time.sleep(POLL_S)
        self._held[key] = (holder, handle)
        return True

    async def aacquire_lock(
        self, key: str, holder: str, acquire_timeout: float | None = None, hold_timeout: float | None = None
    ) -> bool:
        import asyncio

        return await asyncio.to_thread(self.acquire_lock, key, holder, acquire_timeout, hold_timeout)

    def release_lock(self, key: str, holder: str) -> None:
        held = self._held.get(key)
        if held is None or held[0] != holder:
            raise ValueError(f"no lock held by {holder} for {key}")
        fcntl.flock(held[1], fcntl.LOCK_UN)
        held[1].close()
        del self._held[key]

    def is_locked(self, key: str) -> bool:
        if key in self._held:
            return True
        try:
            handle = open(self._path(key))
        except FileNotFoundError:
            return False
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False

    def is_lock_holder(self, key: str, holder: str) -> bool:
        held = self._held.get(key)
        return held is not None and held[0] == holder

    def wait_for_lock(self, key: str, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_locked(key):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    async def await_for_lock(self, key: str, timeout: float | None = None) -> bool:
        import asyncio

        return await asyncio.to_thread(self.wait_for_lock, key, timeout)


def locks_folder(home: Path) -> Path:
    return home / "locks"


@contextmanager
def promotion_lock(model_name: str, home: Path) -> Iterator[None]:
    """Held around judging and promoting `model_name`: two flows never move its aliases at once."""
    from filelock import FileLock

    from foundry.core.model_uri import check_name

    check_name(model_name)  # it names the lock file: one path component
    locks_folder(home).mkdir(parents=True, exist_ok=True)
    with (
        _server_limit(f"foundry-promote-{model_name}"),
        FileLock(str(locks_folder(home) / f"promote-{model_name}.lock")),
    ):
        yield


# How long taking the promotion lock waits for a Prefect server that refuses connections: what Prefect's own client
# gives a server it has reached once (PREFECT_CLIENT_MAX_RETRIES 5: 2 + 4 + 8 + 16 + 32 s). Inside a flow run the
# run's client (which has connected) takes that wait itself, then raises httpx's bare ConnectError; outside one
# (`foundry promote`) a client made afresh does not retry a refused connection at all (Prefect retries ConnectError
# only after a first answer), so a server restarting as the command ran failed it at once. Either way, asked again
# until this has passed, then an error naming the server. `FOUNDRY_PREFECT_WAIT_S` sets another wait (the tests set a
# few seconds: the same path, only shorter).
SERVER_WAIT_S = 62.0
SERVER_WAIT_VARIABLE = "FOUNDRY_PREFECT_WAIT_S"


def server_wait_s() -> float:
    """How long taking the promotion lock waits for an absent Prefect server: `FOUNDRY_PREFECT_WAIT_S` seconds where
    set, else `SERVER_WAIT_S`; a value that is not a positive number is an error naming the variable."""
    from foundry.runtime.env import positive_setting

    return positive_setting(SERVER_WAIT_VARIABLE, SERVER_WAIT_S)


@contextmanager
def _server_limit(name: str) -> Iterator[None]:
    """A global concurrency limit of one slot on the configured Prefect server; nothing without one (the
    temporary server of an embedded run lives and dies with its process, so it could not be shared)."""
    from prefect.concurrency.sync import concurrency
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        yield
        return
    _wait_for_limit(name, PREFECT_API_URL.value(), server_wait_s())
    with concurrency(name, occupy=1, strict=True):
        yield


def _wait_for_limit(name: str, api: str, wait_s: float) -> None:
    """The limit `name` made on the server at `api` when missing, asked again with backoff while the server refuses
    connections; after `wait_s` an error naming the server (fail closed: nothing judged or registered)."""
    import httpx

    deadline, delay = time.monotonic() + wait_s, 1.0
    while True:
        try:
            _ensure_limit(name)
            return
        except httpx.TransportError as exc:  # refused, reset or timed out: the server is away
            if time.monotonic() + delay > deadline:
                raise ConnectionError(
                    f"the Prefect server at {api} did not answer for {wait_s:.0f} s ({exc}) when this flow came to "
                    f"take the lock {name!r}: nothing was judged or registered. Start the server again (`foundry up`) "
                    "and run the flow again, or unset PREFECT_API_URL to run without it."
                ) from exc
            time.sleep(delay)
            delay = min(2 * delay, 16.0)


def _ensure_limit(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
            except ObjectAlreadyExists:  # another flow created it meanwhile
                pass
