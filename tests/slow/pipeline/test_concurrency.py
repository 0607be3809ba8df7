"""Runs at once on one $FOUNDRY_HOME: two identical pipelines started together on a fresh home both finish,
and the data is prepared once (the second waits on the cache key's lock and takes the first one's version)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT

# Set by this test session's own set-up to its home; the runs below must set up a fresh one themselves.
SESSION_SETTINGS = ("MLFLOW_TRACKING_URI", "PREFECT_HOME", "PREFECT_API_URL", "DVC_GLOBAL_CONFIG_DIR")


def fresh_home_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SESSION_SETTINGS and not k.startswith("DVC_S")}
    return {**env, "FOUNDRY_HOME": str(home)}


def test_two_identical_runs_started_together_on_a_fresh_home_both_finish_and_prepare_once(tmp_path):
    from mlflow import MlflowClient

    home = tmp_path / "home"
    command = [
        sys.executable,
        "-m",
        "foundry.cli",
        "run",
        "--config",
        str(REPO_ROOT / "configs" / "tiny.yaml"),
        "--set",
        "data.source=stdlib://json",  # small: the point is the two runs, not the data
        "--set",
        "train.max_steps=10",
        "--set",
        "registry.model_name=twin-gpt",
        "--set",
        "evaluation.min_improvement=100",  # the second to reach the gate must be refused: one outcome
    ]
    runs = [
        subprocess.Popen(
            command,
            cwd=tmp_path,
            env=fresh_home_env(home),
            stdout=open(tmp_path / f"run{i}.log", "wb"),
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    codes = [run.wait(timeout=900) for run in runs]
    logs = [(tmp_path / f"run{i}.log").read_text(errors="replace")[-3000:] for i in range(2)]
    assert codes == [0, 0], logs

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("foundry")
    pipeline_runs = client.search_runs([experiment.experiment_id])
    assert len(pipeline_runs) == 2 and {r.info.status for r in pipeline_runs} == {"FINISHED"}
    assert len({r.data.tags["data_version"] for r in pipeline_runs}) == 1
    prepared = [r for r in pipeline_runs if client.list_artifacts(r.info.run_id, "validation")]
    assert len(prepared) == 1, "both runs prepared the data"
    versions = client.search_model_versions("name='twin-gpt'")
    assert sorted(str(v.version) for v in versions) == ["1", "2"]
    assert all(v.tags["foundry.publication"] == "complete" for v in versions)
    # The gate and the publication run under the promotion lock: version 1 was judged first, with no champion.
    assert str(client.get_model_version_by_alias("twin-gpt", "champion").version) == "1"
    assert client.get_model_version("twin-gpt", "2").tags["gate.passed"] == "false"
