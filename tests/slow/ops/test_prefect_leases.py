"""A slot of a Prefect global concurrency limit (the promotion lock's) held across a restart of the Prefect server
that `foundry up` starts: released when its holder leaves, renewable meanwhile."""

from __future__ import annotations

import socket
import time

import psutil
import pytest
from homes import seeded_home

# The slot's lease is renewed as soon as it is taken, then every 225 s: the restart falls between the two.
RENEWED_S = 2


@pytest.mark.long
def test_a_promotion_slot_held_across_a_server_restart_is_released(tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from foundry.ops import servers as ops
    from tasks.locks import promotion_lock

    home = seeded_home(tmp_path / "home")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prefect = ops.start_prefect(port, home, tmp_path / "prefect.log")
    try:
        ops.wait_healthy(prefect, timeout=180)
        with temporary_settings({PREFECT_API_URL: f"{prefect.url}/api"}):
            with promotion_lock("lease-gpt", home):
                time.sleep(RENEWED_S)
                parent = psutil.Process(prefect.process.pid)
                for member in [*parent.children(recursive=True), parent]:
                    member.kill()
                prefect.process.wait()
                prefect = ops.start_prefect(port, home, tmp_path / "prefect.log")
                ops.wait_healthy(prefect, timeout=180)
                with get_client(sync_client=True) as client:
                    held = client.read_global_concurrency_limit_by_name("foundry-promote-lease-gpt")
                    leases = list((home / "prefect" / "concurrency_leases").glob("*-*.json"))
            with get_client(sync_client=True) as client:
                after = client.read_global_concurrency_limit_by_name("foundry-promote-lease-gpt")
        assert held.active_slots == 1 and leases, leases  # taken, its lease on a file the restart kept
        assert after.active_slots == 0, "the slot stayed taken: every later promotion of lease-gpt would wait"
    finally:
        ops.stop([prefect])
