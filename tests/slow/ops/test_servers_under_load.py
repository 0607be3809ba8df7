"""Four pipelines started at once on one $FOUNDRY_HOME against `foundry up` (Prefect's and MLflow's servers, each
on its SQLite database in that home): every one finishes, four versions are registered, and no log, the servers'
included, says "database is locked"."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO_ROOT
from helpers_configs import NO_BASELINES
from homes import seeded_home

RUNS = 4
MODEL = "load-gpt"  # one name for the four: they meet on its registry rows and its promotion lock
LOCKED = "database is locked"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(home: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str, str]:
    """`foundry up` on free ports, once it prints where its servers answer."""
    prefect_port, mlflow_port = _free_port(), _free_port()
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "foundry.cli",
            "up",
            "--prefect-port",
            str(prefect_port),
            "--mlflow-port",
            str(mlflow_port),
        ],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = []
    for line in up.stdout:  # "Use them: export PREFECT_API_URL=… MLFLOW_TRACKING_URI=…" once both answer
        seen.append(line)
        if found := re.search(r"PREFECT_API_URL=(\S+) MLFLOW_TRACKING_URI=(\S+)", line):
            return up, found[1], found[2]
    raise AssertionError(f"foundry up exited {up.wait()}:\n{''.join(seen)}")


def test_four_pipelines_at_once_against_foundry_up_on_sqlite(tmp_path):
    from mlflow import MlflowClient

    from foundry.core.version_tags import COMPLETE, PUBLICATION

    home = seeded_home(tmp_path / "home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "DVC_"))}
    env |= {"FOUNDRY_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    up, prefect_api, mlflow_url = _up(home, env)
    runs = []
    try:
        command = [sys.executable, "-m", "foundry.cli", "run", "--config", str(REPO_ROOT / "configs" / "tiny.yaml")]
        sets = ["data.source=stdlib://json", "train.max_steps=15", f"registry.model_name={MODEL}", *NO_BASELINES]
        command += [arg for key in sets for arg in ("--set", key)]
        run_env = {**env, "PREFECT_API_URL": prefect_api, "MLFLOW_TRACKING_URI": mlflow_url}
        started = time.monotonic()
        runs = [
            subprocess.Popen(
                command,
                cwd=tmp_path,
                env=run_env,
                stdout=open(tmp_path / f"run{i}.log", "wb"),
                stderr=subprocess.STDOUT,
            )
            for i in range(RUNS)
        ]
        codes = [run.wait(timeout=900) for run in runs]
        print(f"{RUNS} runs ended {time.monotonic() - started:.0f} s after they started: exit {codes}")
        logs = {f"run{i}.log": (tmp_path / f"run{i}.log").read_text(errors="replace") for i in range(RUNS)}
        assert codes == [0] * RUNS, {name: text[-3000:] for name, text in logs.items()}
        versions = MlflowClient(tracking_uri=mlflow_url).search_model_versions(f"name='{MODEL}'")
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
        up.send_signal(signal.SIGTERM)  # stops both servers, as Ctrl-C does
        up.wait(timeout=60)
    logs |= {p.name: p.read_text(errors="replace") for p in (home / "logs").glob("*.log")}
    locked = {name: text.count(LOCKED) for name, text in logs.items() if LOCKED in text}
    print(f"logs read: {sorted(logs)}; '{LOCKED}' in {locked or 'none'}")
    assert not locked, locked
    assert sorted(int(v.version) for v in versions) == list(range(1, RUNS + 1))
    assert all(v.tags[PUBLICATION] == COMPLETE for v in versions)
