"""What a failed launch says: the rank that failed first, not the peers whose collectives broke after it.

The agent's failure records are built here as it builds them (its ProcessFailure, error files written by
its ErrorHandler), with the moments a real failure would leave; tests/slow/training/test_train_processes.py fails
real ranks.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, ProcessFailure

from foundry.training.failures import describe, first_failure


def recorded_failure(tmp_path: Path, monkeypatch, rank: int, error: Exception, at: float) -> ProcessFailure:
    """What the agent makes of a rank whose `@record` wrote `error` at time `at` and which then exited with 1."""
    error_file = tmp_path / str(rank) / "error.json"
    error_file.parent.mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    try:
        raise error
    except Exception as e:
        ErrorHandler().record_exception(e)
    os.utime(error_file, (at, at))
    return ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=1, error_file=str(error_file))


def died(rank: int, sig: signal.Signals, noticed_at: int) -> ProcessFailure:
    """What the agent makes of a rank that died by `sig` and left no error file, stamped when noticed."""
    failure = ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=-sig, error_file="<N/A>")
    failure.timestamp = noticed_at
    return failure


def test_the_first_failure_is_the_cause_not_the_peers_that_followed(tmp_path, monkeypatch):
    broken = RuntimeError("Connection closed by peer")
    # Rank 1 killed at 1000.95, rank 0's collective broke 20 ms later, the agent noticed both at 1001.05:
    # by whole seconds (the agent's own order) rank 0 came first.
    peer = recorded_failure(tmp_path / "a", monkeypatch, 0, broken, at=1000.97)
    assert first_failure({0: peer, 1: died(1, signal.SIGKILL, noticed_at=1001)}) == 1
    # Rank 0 raised; the agent then stopped rank 1 with SIGTERM, or SIGKILL 30 s later.
    cause = recorded_failure(tmp_path / "b", monkeypatch, 0, ValueError("bad shard"), at=1000.2)
    assert first_failure({0: cause, 1: died(1, signal.SIGTERM, noticed_at=1000)}) == 0
    assert first_failure({0: cause, 1: died(1, signal.SIGKILL, noticed_at=1030)}) == 0

    message = describe({1: died(1, signal.SIGTERM, noticed_at=1000), 0: cause}, 2, tmp_path)
    headline, *traceback, others, logs = message.splitlines()
    assert headline == "training rank 0 of 2 exited with code 1: ValueError: bad shard"
    assert traceback[0] == "Traceback (most recent call last):" and traceback[-1] == "ValueError: bad shard"
    assert others == "then rank 1 was killed by SIGTERM" and logs == f"rank logs: {tmp_path / 'b'}"


def test_a_rank_that_raised_and_was_then_stopped_is_named_for_what_it_raised(tmp_path, monkeypatch):
    """Both ranks raise; the agent's SIGTERM reaches the first while it exits, after its error file is written."""
    first = recorded_failure(tmp_path / "a", monkeypatch, 0, FileNotFoundError("manifest.json"), at=1000.1)
    first.exitcode = -signal.SIGTERM
    second = recorded_failure(tmp_path / "b", monkeypatch, 1, FileNotFoundError("manifest.json"), at=1000.3)
    headline = describe({0: first, 1: second}, 2, tmp_path).splitlines()[0]
    assert headline == "training rank 0 of 2 failed and then was killed by SIGTERM: FileNotFoundError: manifest.json"


def test_a_rank_its_sigterm_handler_ended_with_143_is_not_the_cause():
    """The agent's SIGTERM reaches a rank whose handler exits 143 (`foundry.runtime.preemption`): it was stopped
    after the failure, like a rank SIGTERM killed, whatever the clock says."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from foundry.training.failures import first_failure

    stopped = ProcessFailure(local_rank=0, pid=1, exitcode=143, error_file="")
    killed = ProcessFailure(local_rank=1, pid=2, exitcode=-9, error_file="")
    stopped.timestamp = killed.timestamp  # noticed together: the rank order alone would name rank 0
    assert first_failure({0: stopped, 1: killed}) == 1
