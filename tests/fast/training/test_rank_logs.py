"""How the follower reads the elastic agent's files: the training ranks' lines, logged with their rank. Two ranks
in a flow, read back through the Prefect client: tests/slow/training/test_rank_logs_flow.py."""

from __future__ import annotations

import logging

from foundry.training.rank_logs import RankLogs

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "worker.py", line 1, in <module>\n'
    "FileNotFoundError: no such file\n"
    "\n"
    "During handling of the above exception, another exception occurred:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "worker.py", line 2, in <module>\n'
    "RuntimeError: gave up\n"
)


def test_the_follower_logs_new_lines_with_their_rank_and_tracebacks_as_errors(tmp_path, caplog):
    ours, earlier = tmp_path / "foundry-ab12_x1" / "attempt_0", tmp_path / "foundry-0000_x2" / "attempt_0"
    for folder in (ours / "0", ours / "1", earlier / "1"):
        folder.mkdir(parents=True)
    (earlier / "1" / "stderr.log").write_text("an earlier launch's line\n")
    follower = RankLogs(tmp_path, "foundry-ab12")
    (ours / "0" / "stderr.log").write_text("rank 0 of 2\nhalf a li")
    with caplog.at_level(logging.INFO, logger="foundry.training.ranks"):
        follower.poll()
        assert [r.getMessage() for r in caplog.records] == ["[rank0]: rank 0 of 2"]  # whole lines only
        with open(ours / "0" / "stderr.log", "a") as fh:
            fh.write("ne\n")
        # As torch's excepthook in a rank writes a traceback: each line but the empty ones prefixed.
        excepthook = "".join(f"[rank1]: {line}\n" if line else "\n" for line in TRACEBACK.splitlines())
        (ours / "1" / "stderr.log").write_text("started\n" + excepthook + "after it\nno newline")
        follower.poll(final=True)
    logged = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert logged[1] == (logging.INFO, "[rank0]: half a line")
    assert logged[2] == (logging.INFO, "[rank1]: started")
    errors = [message for level, message in logged if level == logging.ERROR and message != "[rank1]: "]
    assert errors == [f"[rank1]: {line}" for line in TRACEBACK.splitlines() if line]  # both chained tracebacks
    assert logged[-2:] == [(logging.INFO, "[rank1]: after it"), (logging.INFO, "[rank1]: no newline")]
    assert not any("earlier launch" in message for _, message in logged)


def test_ranks_of_a_restart_say_so(tmp_path, caplog):
    (tmp_path / "foundry-ab12_x" / "attempt_2" / "1").mkdir(parents=True)
    (tmp_path / "foundry-ab12_x" / "attempt_2" / "1" / "stdout.log").write_text("resumed\n")
    with caplog.at_level(logging.INFO, logger="foundry.training.ranks"):
        RankLogs(tmp_path, "foundry-ab12").poll()
    assert [r.getMessage() for r in caplog.records] == ["[rank1, restart 2]: resumed"]
