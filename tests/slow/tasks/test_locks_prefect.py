"""The promotion lock with a Prefect server: one promotion at a time across homes (the server's global
concurrency limit; each home has its own file lock). The file locks alone: tests/fast/tasks/test_locks.py."""

from __future__ import annotations

from helpers_locks import holds_then_waits


def test_with_a_prefect_server_one_promotion_at_a_time_across_homes(prefect_harness, tmp_path):
    """Two homes (two nodes): the file locks differ, the server's concurrency limit is shared."""
    assert holds_then_waits(tmp_path / "one", tmp_path / "two", "lock-server") == ["A in", "A out", "B in"]
    assert holds_then_waits(tmp_path / "one", tmp_path / "two", "lock-server") == ["A in", "A out", "B in"]
