"""Which rank stopped answering (`foundry.training.heartbeats`), on a real TCPStore: ranks beating from threads, one
that stops beating (as a stopped process does) named with its host; a timeout names, other errors do not wait."""

from __future__ import annotations

import socket
import time

import pytest
from torch.distributed import TCPStore

from foundry.training.heartbeats import TIMED_OUT, Heartbeat, interval_s


@pytest.fixture
def store():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)


def test_a_rank_whose_heartbeat_stopped_is_named_with_its_host_and_the_others_are_not(store, monkeypatch):
    beating = [Heartbeat(store, rank, 3, 0.1) for rank in range(3)]
    monkeypatch.setenv("SLURMD_NODENAME", "node3")  # read at start: each rank's own host
    for heartbeat in beating:
        heartbeat.start()
    beating[2].stop()  # rank 2 silent from here, as if SIGSTOPped
    try:
        started = time.monotonic()
        assert beating[0].silent() == [2]
        assert time.monotonic() - started == pytest.approx(0.2, abs=0.15)  # two intervals
        assert beating[0].describe_silent() == (
            "rank 2 on node3 stopped answering: its heartbeat did not move in 0 s (its process stopped or hung, "
            "or its node lost)"
        )
        assert beating[1].silent() == [2]
    finally:
        for heartbeat in beating:
            heartbeat.stop()


def test_every_rank_beating_names_nobody_and_a_rank_never_started_has_no_host(store):
    beating = [Heartbeat(store, rank, 2, 0.1) for rank in range(2)]
    for heartbeat in beating:
        heartbeat.start()
    try:
        assert beating[0].describe_silent() == ""
        assert Heartbeat(store, 0, 3, 0.1).host(2) == "?"
    finally:
        for heartbeat in beating:
            heartbeat.stop()


def test_the_interval_and_which_errors_are_timeouts():
    assert [interval_s(t) for t in (1, 15, 600)] == [0.5, 1.5, 5.0]
    for words in ("Timed out waiting 15000ms for recv operation", "Application timeout caused pair closure"):
        assert TIMED_OUT.search(words)
    assert TIMED_OUT.search("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3)")
    assert not TIMED_OUT.search("Connection closed by peer [127.0.0.1]:4242")
