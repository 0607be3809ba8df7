"""`train.launcher: slurm` without a cluster: the sbatch command the pipeline submits, the RUN_DIR it hands the
script (its `checkpoints` the attempt's folder), and what it refuses before submitting. The job itself runs in
tests/slow/cluster/test_slurm.py."""

from __future__ import annotations

import os
import sys

import pytest
import yaml
from helpers_configs import tiny

from foundry.core.contracts import DataVersion, Replay
from foundry.training.slurm import SBATCH, Submission, refuse

DATA = DataVersion(data_version="0" * 32, remote="/shared/dvc-remote")


def test_the_script_is_submitted_unchanged_with_the_nodes_and_options_of_the_config(tmp_path):
    config = tiny("train.launcher=slurm", "train.num_nodes=3", "train.devices=2", "train.sbatch_args=-p gpu --time=5")
    attempt = tmp_path / "checkpoints" / "key"
    job = Submission(config, attempt, DATA, "run1")
    job.prepare()
    assert job.command() == [
        "sbatch",
        "--nodes=3",
        "--wait",
        "--parsable",
        f"--output={attempt}/foundry-train-%j.out",
        "-p",
        "gpu",
        "--time=5",
        str(SBATCH),
        str(tmp_path / "checkpoints" / "key.slurm" / "config.yaml"),
        DATA.data_version,
        DATA.remote,
        "run1",
    ]
    assert (job.run_dir / "checkpoints").resolve() == attempt.resolve()  # where the script's ranks write
    assert yaml.safe_load((job.run_dir / "config.yaml").read_text())["train"]["num_nodes"] == 3
    env = job.environment()
    assert (env["RUN_DIR"], env["PYTHON"], env["DEVICES"]) == (str(job.run_dir), sys.executable, "2")
    assert env["MLFLOW_TRACKING_URI"]  # rank 0 logs to the run on the server this process logs to
    assert Submission(config, attempt, DATA, None).command()[-2:] == [DATA.data_version, DATA.remote]
    job.prepare()  # a retry into the same attempt: the link stays
    assert os.readlink(job.run_dir / "checkpoints") == "../key"


def test_a_run_that_replays_pretraining_data_is_refused_before_anything_is_submitted(tmp_path):
    replay = Replay(data=DATA, dir=tmp_path)
    with pytest.raises(ValueError, match="align.replay_fraction: 0 or train.launcher: local"):
        refuse(replay)
