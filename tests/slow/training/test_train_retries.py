"""The train task's retries inside a flow: a crash is retried, an error in the run's input is not."""

from __future__ import annotations

from pathlib import Path

from helpers_configs import tiny

from foundry.training.launch import launch


def _train_in_a_flow(config, data_dir: Path, home: Path):
    """`tasks.training.train` (the flows' call, with `train.retries`) inside a flow; (its final state, how many
    times the train task ran)."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from foundry.core.contracts import DataVersion, RunContext
    from foundry.runtime import tracking
    from tasks.training import Training, train

    @flow(name="one-train-task")
    def one_train_task() -> None:
        run = RunContext(run_id=tracking.start_pipeline_run(config), dir=home / "run", home=home)
        train(Training(config, data_dir, DataVersion(data_version="5" * 32, remote=""), run))

    state = one_train_task(return_state=True)
    only = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
    with get_client(sync_client=True) as client:
        (task_run,) = client.read_task_runs(flow_run_filter=only)
    return state, task_run.run_count


def test_a_crash_is_retried_and_an_error_in_the_input_is_not(prefect_harness, tiny_dataset, tmp_path):
    """A parent trained with other settings fails the same way every time: one run, not `train.retries` more."""
    parent = launch(tiny("train.max_steps=2"), tiny_dataset, tmp_path / "parent", None, "v-test")
    refused = tiny(f"train.init_from={parent}", "train.max_steps=2", "model.qk_norm=true")
    assert refused.train.retries == 1
    state, runs = _train_in_a_flow(refused, tiny_dataset, tmp_path / "refused")
    assert state.is_failed() and runs == 1, (state.message, runs)
    # A dataset gone from its folder (a file error, which a retry may not meet again) is tried once more.
    state, runs = _train_in_a_flow(tiny("train.max_steps=2"), tmp_path / "no-such-dataset", tmp_path / "gone")
    assert state.is_failed() and runs == 2, (state.message, runs)
