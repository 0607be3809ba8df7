"""The training ranks' lines in the Prefect run: a two-rank tiny training inside a flow, its logs read back
through the Prefect client. How the follower reads the elastic agent's files: tests/fast/training/test_rank_logs.py."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from conftest import REPO_ROOT

# --- two ranks in a flow -------------------------------------------------------------------------------


def _tiny(*overrides: str):
    from foundry.config import load_config

    return load_config(REPO_ROOT / "configs" / "tiny.yaml", ["train.num_nodes=2", *overrides])


def _train_in_a_flow(config, data_dir: Path, home: Path):
    """The train task with two ranks inside a flow; (final state, the flow run's logs, oldest first)."""
    from prefect import flow

    from foundry.core.contracts import DataVersion, RunContext
    from foundry.runtime import tracking
    from tasks.training import Training, train_task

    @flow(name="two-ranks")
    def two_ranks() -> None:
        run = RunContext(run_id=tracking.start_pipeline_run(config), dir=home / "run", home=home)
        train_task(Training(config, data_dir, DataVersion(data_version="5" * 32, remote=""), run))

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


def test_a_ranks_traceback_reaches_the_prefect_run_as_errors(prefect_harness, tmp_path):
    state, logs = _train_in_a_flow(_tiny(), tmp_path / "no-such-dataset", tmp_path / "home")
    assert state.is_failed()
    errors = [log.message for log in logs if log.level == logging.ERROR and log.message.startswith("[rank")]
    assert any(re.match(r"\[rank\d\]: Traceback \(most recent call last\)", m) for m in errors), errors
    assert any(re.match(r"\[rank\d\]: FileNotFoundError: .*no-such-dataset/manifest\.json", m) for m in errors)
