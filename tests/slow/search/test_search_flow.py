"""`foundry search` end to end on the tiny twin: two trials at a time on a local Dask cluster, killed with
kill -9 in the middle of the study, then the same command again, which continues the study, records it and
trains the best config through the pipeline (`--train-best`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from conftest import REPO_ROOT, on_every_core, run_page
from helpers_configs import NO_BASELINES
from optuna.trial import TrialState

from foundry.config import load_config

STUDY = "it-search"
N_TRIALS = 4
SETS = [
    f"search.study_name={STUDY}",
    f"search.n_trials={N_TRIALS}",
    "search.trial_max_steps=60",  # long enough to be caught in the middle
    "train.max_steps=20",  # what --train-best trains: the config's own length, not the trials'
    "registry.model_name=it-search-gpt",
    *NO_BASELINES,  # --train-best's evaluation: no test reads a compressor's score
]


def _command(*extra: str) -> list[str]:
    sets = [arg for value in SETS for arg in ("--set", value)]
    return [
        sys.executable,
        "-m",
        "foundry.cli",
        "search",
        "--config",
        str(REPO_ROOT / "configs/tiny.yaml"),
        *sets,
        *extra,
    ]


def _study(home: Path) -> optuna.Study:
    from foundry.search.study import open_storage

    return optuna.load_study(study_name=STUDY, storage=open_storage(str(home / "search" / STUDY / "journal.log")))


def _mid_study(home: Path) -> bool:
    """A trial finished and another is training (it has reported validation, and is far from its 60th
    step): a kill now interrupts it."""
    if not (home / "search" / STUDY / "journal.log").exists():
        return False
    trials = _study(home).get_trials(deepcopy=False)
    running = [t for t in trials if t.state == TrialState.RUNNING and 0 < len(t.intermediate_values) <= 6]
    return any(t.state == TrialState.COMPLETE for t in trials) and bool(running)


@pytest.fixture(scope="module")
def killed_and_rerun(prefect_harness, foundry_home, tmp_path_factory):
    from prefect.settings import PREFECT_API_URL

    cwd = tmp_path_factory.mktemp("search-cwd")
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}  # the harness's server, not a temporary one
    # The trials split the machine's cores, not this xdist worker's one; the module's tests read the same cores.
    with on_every_core():
        yield run_killed_and_again(cwd, env, foundry_home)


def run_killed_and_again(cwd: Path, env: dict[str, str], foundry_home: Path) -> tuple:
    first = subprocess.Popen(_command(), cwd=cwd, env=env, start_new_session=True, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 400
    while not _mid_study(foundry_home):
        assert first.poll() is None, "the search ended before it could be interrupted"
        assert time.monotonic() < deadline, "no trial was reported in time"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the flow's process, its Dask workers: the whole process group
    assert first.wait() == -signal.SIGKILL
    before = _study(foundry_home).trials
    rerun = subprocess.run(
        _command("--train-best", "--out", "best.yaml"), cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-4000:]
    return before, _study(foundry_home), rerun.stdout, cwd


def test_the_rerun_continues_the_study_and_the_total_adds_up(killed_and_rerun):
    before, study, _, _ = killed_and_rerun
    interrupted = [t.number for t in before if t.state == TrialState.RUNNING]
    assert interrupted, "the kill interrupted no trial"
    kept = [t for t in before if t.state.is_finished()]
    assert kept and all(study.trials[t.number].state == t.state for t in kept)  # completed trials are kept
    states = {t.number: t.state for t in study.trials}
    assert all(states[n] == TrialState.FAIL for n in interrupted)
    counted = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(counted) == N_TRIALS and len(study.trials) == N_TRIALS + len(interrupted)
    retried = {t.user_attrs["retry_of"]: t for t in study.trials if "retry_of" in t.user_attrs}
    assert sorted(retried) == interrupted  # each interrupted trial was tried again with its parameters
    for n in interrupted:  # all of them, or those drawn before a kill that landed between two draws
        assert retried[n].params.items() >= study.trials[n].params.items()


def test_the_first_trials_follow_the_seed(killed_and_rerun):
    """The first run's trials, in the order asked, are what a fresh study with the same seed suggests (a trial
    the kill caught between two draws holds the first of them)."""
    from foundry.config.search import base_values
    from foundry.search.study import build_sampler, suggest

    before, _, _, _ = killed_and_rerun
    config = load_config(REPO_ROOT / "configs/tiny.yaml", SETS)
    fresh = optuna.create_study(sampler=build_sampler(config.search), direction="minimize")
    fresh.enqueue_trial(base_values(config.search, config))
    seeded = [suggest(fresh.ask(), config.search) for _ in before]
    assert [t.params for t in before] == [{k: v for k, v in s.items() if k in t.params} for s, t in zip(seeded, before)]
    assert all(len(t.params) == len(config.search.space) for t in before if t.state.is_finished())


def test_each_trial_is_a_nested_run_with_its_params_curve_and_holdout_metric(killed_and_rerun):
    from mlflow import MlflowClient

    from foundry.search.study import core_shares

    before, study, _, _ = killed_and_rerun
    client = MlflowClient()
    parent = study.user_attrs["mlflow_run_id"]
    for trial in study.trials:
        if "mlflow_run_id" not in trial.user_attrs:  # killed between asking the study and starting its run
            assert trial.state == TrialState.FAIL and trial.number in [
                t.number for t in before if not t.state.is_finished()
            ]
            continue
        run = client.get_run(trial.user_attrs["mlflow_run_id"])
        assert run.data.tags["mlflow.parentRunId"] == parent
        assert run.data.tags["search.trial"] == str(trial.number)
        for key, value in trial.params.items():
            assert run.data.params[key] == str(value)
        if trial.state == TrialState.FAIL:
            assert (run.info.status, run.data.tags["search.state"]) == ("FAILED", "interrupted")
            continue
        assert run.info.status == "FINISHED"
        curve = client.get_metric_history(run.info.run_id, "search/val_bits_per_byte")
        assert [m.step for m in curve] == sorted(trial.intermediate_values)
        if trial.state == TrialState.COMPLETE:
            assert run.data.metrics["holdout/bits_per_byte"] == pytest.approx(trial.value)
            assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 60 // 5
    # Each vocabulary its own dataset, prepared before the trials.
    versions = {}
    with_runs = [t for t in study.trials if "mlflow_run_id" in t.user_attrs]
    for trial in with_runs:
        tags = client.get_run(trial.user_attrs["mlflow_run_id"]).data.tags
        if "data_version" in tags:  # a trial interrupted before its worker took it has none
            versions.setdefault(trial.params["tokenizer.vocab_size"], set()).add(tags["data_version"])
    assert all(len(v) == 1 for v in versions.values()) and len(set.union(*versions.values())) == len(versions)
    # Two at a time, each on its own share of the cores.
    shares = {",".join(map(str, share)) for share in core_shares(2)}
    ran = [client.get_run(t.user_attrs["mlflow_run_id"]).data.tags.get("search.cores") for t in with_runs]
    assert {cores for cores in ran if cores} == shares


def test_the_parent_run_holds_the_best_trial_the_table_and_the_plots(killed_and_rerun):
    from mlflow import MlflowClient

    before, study, _, _ = killed_and_rerun
    client = MlflowClient()
    parent = client.get_run(study.user_attrs["mlflow_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["foundry.stage"] == "search"
    assert parent.data.tags["search.best_trial"] == str(study.best_trial.number)
    assert parent.data.metrics["search/best_bits_per_byte"] == pytest.approx(study.best_value)
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "search")}
    assert {"search/trials.json", "search/best.yaml", "search/plots"} <= artifacts
    plots = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "search/plots")}
    assert plots == {
        f"{name}.png"
        for name in ("optimization_history", "param_importances", "parallel_coordinate", "intermediate_values")
    }
    table = client.load_table(parent.info.experiment_id, "search/trials.json", [parent.info.run_id])
    assert sorted(table["trial"]) == [t.number for t in study.trials]
    assert set(table["state"]) == {"complete", "pruned", "fail"} or set(table["state"]) == {"complete", "fail"}


def test_the_flow_run_shows_the_same_table_as_an_artifact(killed_and_rerun):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    _, study, _, _ = killed_and_rerun
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[f"search-{STUDY}"])), limit=1
        )
    assert artifact.type == "table"
    rows = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    assert sorted(row["trial"] for row in rows) == [t.number for t in study.trials]


def test_the_best_config_is_what_foundry_run_takes_and_train_best_registered_it(killed_and_rerun):
    from mlflow import MlflowClient

    _, study, stdout, cwd = killed_and_rerun
    config = load_config(cwd / "best.yaml")  # as `foundry run --config best.yaml` reads it
    for key, value in study.best_trial.params.items():
        section, _, name = key.partition(".")
        assert getattr(getattr(config, section), name) == value
    assert config.train.max_steps == 20  # the config's own, not the trials' 60
    assert f"best       trial {study.best_trial.number}:" in stdout
    (version,) = MlflowClient().search_model_versions("name='it-search-gpt'")
    run = MlflowClient().get_run(version.run_id)
    for key, value in study.best_trial.params.items():
        assert run.data.params[key] == str(value)
    assert "models:/it-search-gpt/1" in stdout


def test_the_run_page_is_named_for_the_study_and_shows_what_the_terminal_printed(killed_and_rerun):
    _, study, stdout, _ = killed_and_rerun
    parent = study.user_attrs["mlflow_run_id"]  # the re-run's flow run tagged it on continuing the study
    flow_run, artifacts = run_page(parent)
    assert flow_run.name == f"search-{STUDY}"
    summary = artifacts["pipeline-summary"].data
    assert "Foundry search finished" in summary and f"MLflow run {parent}" in summary
    block = summary.split("```")[1].strip("\n")
    assert block in stdout  # the summary `foundry search` printed, line for line
    assert f"/runs/{parent}" in artifacts["mlflow-run"].data and "model-version" not in artifacts
