"""The training ranks' lines in the Prefect run: a two-rank tiny training inside a flow, its logs read back
through the Prefect client; and how the follower reads the elastic agent's files."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from foundry.training.rank_logs import RankLogs

REPO_ROOT = Path(__file__).resolve().parent.parent
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


# --- two ranks in a flow -------------------------------------------------------------------------------


def _tiny(*overrides: str):
    from foundry.config import load_config

    return load_config(REPO_ROOT / "configs" / "tiny.yaml", ["train.num_nodes=2", *overrides])


def _train_in_a_flow(config, data_dir: Path, home: Path):
    """The train task with two ranks inside a flow; (final state, the flow run's logs, oldest first)."""
    from prefect import flow

    from foundry import tracking
    from foundry.contracts import DataVersion, RunContext
    from tasks.training import train_task

    @flow(name="two-ranks")
    def two_ranks() -> None:
        run = RunContext(run_id=tracking.start_pipeline_run(config), dir=home / "run", home=home)
        train_task(config, data_dir, DataVersion(data_version="5" * 32, remote=""), run)

    state = two_ranks(return_state=True)
    return state, _logs(state.state_details.flow_run_id)


def _logs(flow_run_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # logs reach the API in batches: send what is queued before reading (CI read none)
    only = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
    logs: list = []
    with get_client(sync_client=True) as client:
        while page := client.read_logs(only, limit=200, offset=len(logs), sort=LogSort.TIMESTAMP_ASC):
            logs += page
    return logs


@pytest.mark.slow
def test_the_ranks_lines_reach_the_prefect_run_while_it_trains(prefect_harness, tiny_dataset, tmp_path):
    steps = 20
    config = _tiny(f"train.max_steps={steps}", "train.progress_every_s=0.2")
    state, logs = _train_in_a_flow(config, tiny_dataset, tmp_path / "home")
    assert state.is_completed(), state.message
    at = {log.message: log.timestamp for log in logs}
    # Each rank's own lines, forwarded from the files the agent writes: rank 1 and Lightning's on rank 0.
    started = [m for m in at if re.fullmatch(r"\[rank1\]: rank 1 of 2: node 1, local rank 0", m)]
    assert started and any(m.startswith("[rank0]: `Trainer.fit` stopped: `max_steps=20` reached") for m in at)
    # Rank 0's progress (it reports through its progress file), in the task's logs at a steady rhythm.
    progress = {
        int(m.group(1)): at[line] for line in at if (m := re.match(rf"step (\d+)/{steps} \(\d+%\)  loss", line))
    }
    assert max(progress) == steps
    during = [when for step, when in progress.items() if 0 < step < steps]
    assert during, sorted(progress)
    assert at[started[0]] < max(during)  # forwarded while the ranks ran, not after they ended


@pytest.mark.slow
def test_a_ranks_traceback_reaches_the_prefect_run_as_errors(prefect_harness, tmp_path):
    state, logs = _train_in_a_flow(_tiny(), tmp_path / "no-such-dataset", tmp_path / "home")
    assert state.is_failed()
    errors = [log.message for log in logs if log.level == logging.ERROR and log.message.startswith("[rank")]
    assert any(re.match(r"\[rank\d\]: Traceback \(most recent call last\)", m) for m in errors), errors
    assert any(re.match(r"\[rank\d\]: FileNotFoundError: .*no-such-dataset/manifest\.json", m) for m in errors)
