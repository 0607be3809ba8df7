"""The MLflow tracking server killed under `foundry run` mid-training and started again: the training waits
for it (MLflow's client retries a refused connection with backoff) and the run ends with every metric step
logged and one registered version with its files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from helpers_configs import NO_BASELINES
from helpers_outages import server_down_s
from homes import seeded_home

from foundry.core.model_uri import LoggedModelUri
from foundry.core.version_tags import COMPLETE, PUBLICATION

REPO = Path(__file__).resolve().parents[3]
# The run's length (killed at step 12 or later: the steps after the outage are there to be checked; tiny.yaml's 150
# only took longer) and configs/tiny.yaml's log_every_n_steps.
MAX_STEPS, LOG_EVERY = 60, 5
MODEL = "lost-server"
# MLflow's client (MLFLOW_HTTP_REQUEST_MAX_RETRIES 7, MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR 2; urllib3 sleeps
# 2 * 2**(n-1) s after the n-th failure from the second on, plus up to 1 s of jitter, capped at 120 s) tries a
# refused call at 0, 0, 4, 12, 28, 60, 124 and 244 s (each up to 5 s later with the jitter), then raises.
RETRY_BUDGET_S = 249
# How long the server stays away (helpers_outages); starting it again takes ~10 s more. 5 s plus the start is met by
# the try at 28 s (20 s plus the start by the one at 60 s, the 60 s by the one at 124 s).
DOWN_S = server_down_s()


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL to the server and every process it started (its workers): it shares the test's process group,
    so not `killpg`."""
    parent = psutil.Process(process.pid)
    for member in [*parent.children(recursive=True), parent]:
        member.kill()
    process.wait()


def test_the_tracking_server_killed_mid_training_loses_nothing(mlflow_server, tmp_path):
    state, running, store = mlflow_server
    running()
    sets = [
        f"registry.model_name={MODEL}",
        f"train.max_steps={MAX_STEPS}",
        "train.progress_every_s=0.2",
        *NO_BASELINES,
    ]
    command = [sys.executable, "-m", "foundry.cli", "run", "--config", str(REPO / "configs" / "tiny.yaml")]
    command += [arg for key in sets for arg in ("--set", key)]
    env = {
        **os.environ,
        "FOUNDRY_HOME": str(seeded_home(tmp_path / "home")),  # its Prefect database made: no migration
        "PYTHONPATH": str(REPO),
        "MLFLOW_TRACKING_URI": state["server"].url,
    }
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    training = threading.Event()

    def read():  # the whole of stderr, so the run never blocks on a full pipe
        for line in proc.stderr:
            lines.append(line)
            if "Task run 'train" in line and (done := re.search(r" - step (\d+)/", line)) and int(done[1]) >= 12:
                training.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert training.wait(timeout=300), "".join(lines[-40:])
        kill_tree(state["server"].process)
        killed = time.monotonic()
        time.sleep(DOWN_S)
        running()
        back = time.monotonic() - killed
        code = proc.wait(timeout=600)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
        running()  # the session's server, for whoever comes next
    reader.join(timeout=30)
    output = "".join(lines)
    print(f"server back after {back:.0f} s; the run ended {took:.0f} s after the kill, exit {code}")
    assert code == 0, output[-5000:]

    experiment = store.get_experiment_by_name("foundry").experiment_id
    (run,) = store.search_runs([experiment], f"params.`registry.model_name` = '{MODEL}'")
    assert run.info.status == "FINISHED"
    history = sorted(store.get_metric_history(run.info.run_id, "train/loss"), key=lambda m: m.step)
    assert_each_step_once_or_repeated_alike(history)
    # Each point's time is taken before its call: the one the kill caught, then the next, after the wait.
    stall = max(b.timestamp - a.timestamp for a, b in zip(history, history[1:])) / 1000
    print(f"training waited {stall:.0f} s for the server")
    assert DOWN_S <= stall <= RETRY_BUDGET_S + 10, stall  # and the 5 steps between the two points
    (version,) = store.search_model_versions(f"name = '{MODEL}'")
    assert version.tags[PUBLICATION] == COMPLETE
    location = store.get_logged_model(LoggedModelUri.id_in(version.source)).artifact_location.removeprefix(
        "mlflow-artifacts:/"
    )
    folder = state["home"] / "mlflow" / "served-artifacts" / location
    files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    assert "MLmodel" in files and "artifacts/tokenizer.json" in files, files
    assert len([f for f in files if f.startswith("artifacts/")]) == 2, files  # and the checkpoint


def assert_each_step_once_or_repeated_alike(history) -> None:
    """Every logged step present, none lost. The call the kill caught may have reached the server before the
    kill while its answer did not reach the client, which then sent it again (at least once): a step may appear
    twice, but only with the same value (and no other step repeated)."""
    steps = [m.step for m in history]
    assert sorted(set(steps)) == list(range(LOG_EVERY - 1, MAX_STEPS, LOG_EVERY)), steps
    values: dict[int, set[float]] = {}
    for metric in history:
        values.setdefault(metric.step, set()).add(metric.value)
    assert all(len(seen) == 1 for seen in values.values()), {s: v for s, v in values.items() if len(v) > 1}
    repeated = [step for step in values if steps.count(step) > 1]
    assert len(repeated) <= 1, repeated  # only the call in flight at the kill is sent again


# A client told to give up sooner than MLflow's default four minutes: a refused call is tried at 0, 0 and ~2 s
# (urllib3's backoff of 1 * 2**(n-1) s from the second failure, plus MLflow's jitter of up to 1 s), then raises.
QUICK_CLIENT = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}


def test_a_tracking_server_that_never_comes_back_stops_the_run_naming_it(mlflow_server, tmp_path):
    """#56 point 4(a): the server killed mid-training and not started again. The run stops by itself, within its
    client's retries of each call, naming the server; nothing is registered; the checkpoints the training wrote stay
    where the re-run resumes from them (that resume: tests/slow/training/test_train_processes.py, after kill -9)."""
    from foundry.checkpointing.manifest import latest_valid

    state, running, store = mlflow_server
    running()
    url = state["server"].url
    model = "never-back"
    sets = [f"registry.model_name={model}", "train.progress_every_s=0.2", *NO_BASELINES]
    command = [sys.executable, "-m", "foundry.cli", "run", "--config", str(REPO / "configs" / "tiny.yaml")]
    command += [arg for key in sets for arg in ("--set", key)]
    home = seeded_home(tmp_path / "home")  # its Prefect database made: the server starts without migrating
    env = {**os.environ, **QUICK_CLIENT, "FOUNDRY_HOME": str(home), "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": url}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    training = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            if "Task run 'train" in line and (done := re.search(r" - step (\d+)/", line)) and int(done[1]) >= 12:
                training.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert training.wait(timeout=300), "".join(lines[-40:])
        kill_tree(state["server"].process)
        killed = time.monotonic()
        code = proc.wait(timeout=300)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
        running()  # the session's server, for whoever comes next
    reader.join(timeout=30)
    output = "".join(lines)
    print(f"the run ended {took:.0f} s after the kill, exit {code}; its last lines:", *output.splitlines()[-4:])
    assert code != 0, output[-5000:]
    assert took < 120, output[-5000:]
    assert url in output[-3000:], output[-5000:]  # the command's own error, last
    assert store.search_model_versions(f"name = '{model}'") == []
    (attempt,) = [p for p in (home / "checkpoints").iterdir() if p.is_dir()]
    assert latest_valid(attempt).step >= 10  # the re-run's resume point
