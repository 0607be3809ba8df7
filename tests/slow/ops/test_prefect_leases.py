"""The promotion lock's slot (a Prefect global concurrency limit) across restarts of the Prefect server that
`foundry up` starts: a slot held across a restart is released when its holder leaves (its lease kept on a file),
and a flow that comes to its promotion while the server is away waits for it."""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest
from homes import seeded_home

# The slot's lease is renewed as soon as it is taken, then every 225 s: the restart falls between the two.
RENEWED_S = 2
AWAY_S = 5  # then the seconds it takes to start


def _kill_tree(process) -> None:
    """SIGKILL to the server and every process it started."""
    parent = psutil.Process(process.pid)
    for member in [*parent.children(recursive=True), parent]:
        member.kill()
    process.wait()


@pytest.mark.long
def test_a_promotion_slot_is_released_across_a_restart_and_a_promotion_waits_for_the_server(tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from foundry.ops import servers as ops
    from tasks.locks import SERVER_WAIT_S, promotion_lock

    home = seeded_home(tmp_path / "home")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def start() -> ops.Server:
        server = ops.start_prefect(port, home, tmp_path / "prefect.log")
        ops.wait_healthy(server, timeout=180)
        return server

    prefect = start()
    try:
        with temporary_settings({PREFECT_API_URL: f"{prefect.url}/api"}):
            with promotion_lock("lease-gpt", home):
                time.sleep(RENEWED_S)
                _kill_tree(prefect.process)
                prefect = start()
                with get_client(sync_client=True) as client:
                    held = client.read_global_concurrency_limit_by_name("foundry-promote-lease-gpt")
                    leases = list((home / "prefect" / "concurrency_leases").glob("*-*.json"))
            with get_client(sync_client=True) as client:
                after = client.read_global_concurrency_limit_by_name("foundry-promote-lease-gpt")
        assert held.active_slots == 1 and leases, leases  # taken, its lease on a file the restart kept
        assert after.active_slots == 0, "the slot stayed taken: every later promotion of lease-gpt would wait"

        # Away again as the next flow comes to its promotion: it waits for the server (tasks.locks.SERVER_WAIT_S).
        _kill_tree(prefect.process)
        again = threading.Thread(target=lambda: time.sleep(AWAY_S) or restarted.append(start()))
        restarted = []
        started = time.monotonic()
        again.start()
        with temporary_settings({PREFECT_API_URL: f"{prefect.url}/api"}), promotion_lock("lease-gpt", home):
            waited = time.monotonic() - started
        again.join()
        prefect = restarted[0]
        assert AWAY_S <= waited <= SERVER_WAIT_S, waited
    finally:
        ops.stop([prefect])
