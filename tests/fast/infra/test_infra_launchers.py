"""infra/'s launch scripts run with stand-ins for srun, scontrol and python: the torchrun command they
start, read by torchrun's own parser into the launch config it would run, the arguments it hands the
training entry point, and their embedded `python -c` programs run for real."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from infra_files import REPO, SBATCH, TRAIN_ENTRY, container_commands, python_snippets, pytorchjob

# --- the launch scripts, run with stand-ins -----------------------------------------------------

FAKE_PYTHON = """#!{python} -S
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
if sys.argv[1:2] == ["-c"]:
    print("{{}}")
"""
FAKE_SRUN = """#!/bin/bash
while [[ $1 == -* ]]; do shift; done
for ((i = 0; i < SLURM_JOB_NUM_NODES; i++)); do
    SLURM_PROCID=$i SLURM_NODEID=$i SLURM_LOCALID=0 SLURM_NTASKS=$SLURM_JOB_NUM_NODES "$@" || exit $?
done
"""
FAKE_SCONTROL = """#!/bin/bash
case "$1 $2 $3" in
"show hostnames "*) printf '%s\\n' gpu01 gpu02 gpu03 ;;
"show node gpu01") echo "   NodeAddr=10.0.0.1 NodeHostName=gpu01 Version=22.05.8" ;;
*) exit 1 ;;
esac
"""


@pytest.fixture()
def stand_ins(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"python": FAKE_PYTHON.format(python=sys.executable), "srun": FAKE_SRUN, "scontrol": FAKE_SCONTROL}
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_LOG": str(log),
        "HOME": str(tmp_path),
        "MLFLOW_TRACKING_URI": "http://mlflow:5000",
        "MLFLOW_RUN_ID": "inherited",
    }

    def calls() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()]

    return env, calls


def _torchrun_calls(calls: list[dict]) -> list[dict]:
    return [c for c in calls if c["argv"][:2] == ["-m", "torch.distributed.run"]]


def torchrun(argv: list[str], monkeypatch) -> tuple:
    """What torchrun makes of `argv`: its LaunchConfig and the arguments after the interpreter of every rank."""
    from torch.distributed.run import config_from_args, get_args_parser

    with monkeypatch.context() as m:
        m.setenv("OMP_NUM_THREADS", "1")  # else torchrun sets it in this process for several ranks per node
        config, program, args = config_from_args(get_args_parser().parse_args(argv))
    assert program == sys.executable and args[:3] == ["-u", "-m", TRAIN_ENTRY]
    return config, args[3:]


def worker_accepts(args: list[str]) -> None:
    from foundry.training.worker import build_parser

    build_parser().parse_args(args)  # exits on a flag or value the entry point does not take


def test_pytorchjob_runs_torchrun_with_the_pod_index_as_node_rank(stand_ins, tmp_path, monkeypatch):
    env, calls = stand_ins
    (training,) = pytorchjob()["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    home = tmp_path / "home"
    home.mkdir()
    operator = {"MASTER_ADDR": "foundry-train-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "2"}
    config_map = {
        "DATA_VERSION": "abc123",
        "RUN_ID": "run42",
        "CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "FOUNDRY_HOME": str(home),
    }
    subprocess.run(training["command"] + training.get("args", []), env={**env, **operator, **config_map}, check=True)
    (render,) = [c for c in calls() if c["argv"][0] == "-c"]
    assert render["argv"][-2:] == ["train.num_nodes=3", "train.devices=1"]
    (call,) = _torchrun_calls(calls())
    launch, args = torchrun(call["argv"][2:], monkeypatch)
    assert (launch.min_nodes, launch.max_nodes, launch.nproc_per_node, launch.max_restarts) == (3, 3, 1, 0)
    # Static rendezvous at the Master pod, whose agent holds the store; this pod is node 2.
    assert (launch.rdzv_backend, launch.rdzv_endpoint) == ("static", "foundry-train-master-0:23456")
    assert launch.rdzv_configs["rank"] == 2
    assert launch.logs_specs.root_log_dir == f"{tmp_path}/checkpoints/rank-logs"
    assert args == [
        "--config",
        f"{home}/train_config.json",
        "--data",
        f"{home}/hydrated/abc123",
        "--checkpoints",
        f"{tmp_path}/checkpoints",
        "--data-version",
        "abc123",
        "--run-id",
        "run42",
    ]
    worker_accepts(args)
    assert "MLFLOW_RUN_ID" not in call["env"]


@pytest.mark.parametrize("devices", [None, "2"])
def test_sbatch_runs_one_torchrun_per_node_after_each_node_hydrates(stand_ins, tmp_path, monkeypatch, devices):
    env, calls = stand_ins
    submit = tmp_path / "submit"
    submit.mkdir()
    slurm = {
        "SLURM_SUBMIT_DIR": str(submit),
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "gpu[01-03]",
        "SLURM_JOB_NUM_NODES": "3",
        "NODE_LOCAL_DIR": str(tmp_path / "local"),
    }
    optional = {"DEVICES": devices} if devices else {}
    subprocess.run(
        ["bash", str(SBATCH), "params.yaml", "abc123", "s3://bucket/remote", "run42"],
        env={**env, **slurm, **optional},
        check=True,
        capture_output=True,
    )
    per_node = int(devices or 1)
    made = calls()
    (render,) = [c for c in made if c["argv"][0] == "-c" and "load_config" in c["argv"][1]]
    assert render["argv"][2:] == ["params.yaml", "train.num_nodes=3", f"train.devices={per_node}"]
    hydrations = [c for c in made if c["argv"][:3] == ["-m", "foundry.cli", "hydrate"]]
    assert [c["argv"][3:] for c in hydrations] == [["abc123", "--remote", "s3://bucket/remote"]] * 3
    agents = _torchrun_calls(made)
    assert len(agents) == 3 and made.index(agents[0]) > made.index(hydrations[-1])
    assert len({json.dumps(c["argv"]) for c in agents}) == 1  # every node the same command: c10d numbers them
    home, run_dir = tmp_path / "local" / "foundry-77", submit / "runs" / "slurm-77"
    launch, args = torchrun(agents[0]["argv"][2:], monkeypatch)
    assert (launch.min_nodes, launch.max_nodes, launch.nproc_per_node, launch.max_restarts) == (3, 3, per_node, 0)
    assert (launch.rdzv_backend, launch.run_id) == ("c10d", "77")
    assert launch.rdzv_endpoint == f"10.0.0.1:{29500 + 77}"  # the first node's NodeAddr: its name may not resolve
    assert launch.logs_specs.root_log_dir == f"{run_dir}/checkpoints/rank-logs"
    assert args == [
        "--config",
        f"{run_dir}/train_config.json",
        "--data",
        f"{home}/hydrated/abc123",
        "--checkpoints",
        f"{run_dir}/checkpoints",
        "--data-version",
        "abc123",
        "--run-id",
        "run42",
    ]
    worker_accepts(args)
    for call in agents:
        assert call["env"]["FOUNDRY_HOME"] == str(home) and "MLFLOW_RUN_ID" not in call["env"]


def _all_snippets() -> list[str]:
    replicas = pytorchjob()["spec"]["pytorchReplicaSpecs"].values()
    scripts = [SBATCH.read_text()] + [" ".join(c[2] or []) for spec in replicas for c in container_commands(spec)]
    return [s for script in scripts for s in python_snippets(script)]


def test_config_snippets_render_a_valid_config_sized_to_the_job(monkeypatch, capsys):
    from foundry.config import validate

    snippets = [s for s in _all_snippets() if "load_config" in s]
    assert len(snippets) == 3  # sbatch, Master, Worker
    for code in snippets:
        argv = ["-c", str(REPO / "configs" / "tiny.yaml"), "train.num_nodes=4", "train.devices=1"]
        monkeypatch.setattr(sys, "argv", argv)
        exec(compile(code, "<python -c>", "exec"), {"__name__": "__main__"})
        config = validate(json.loads(capsys.readouterr().out))
        assert (config.train.num_nodes, config.train.devices) == (4, 1)
