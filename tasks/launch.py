"""Starting the training processes: in this process for one rank, else one process per rank.

Each process gets the standard rendezvous variables, exactly as torchrun or SLURM would set them,
so the local launch exercises the same code path as a cluster.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from foundry.config import FoundryConfig


class TrainingFailed(RuntimeError):
    """A training process exited with an error; the message names its rank."""


def world_size(config: FoundryConfig) -> int:
    return config.train.num_nodes * config.train.devices


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_environments(config: FoundryConfig, port: int) -> list[dict[str, str]]:
    """The rendezvous variables of every rank, node by node."""
    t = config.train
    return [
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world_size(config)),
         "NODE_RANK": str(node), "LOCAL_RANK": str(local), "RANK": str(node * t.devices + local)}
        for node in range(t.num_nodes) for local in range(t.devices)
    ]


def launch_local(
    config: FoundryConfig, data_dir: Path, checkpoint_dir: Path, run_id: str | None, data_version: str,
    poll_seconds: float = 0.5,
) -> Path:
    """Run all ranks on this machine and wait; if one fails, stop the rest and say which."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    config_path = checkpoint_dir.parent / "train_config.json"
    config_path.write_text(config.model_dump_json())
    command = [sys.executable, "-m", "tasks.train_worker", "--config", str(config_path), "--data", str(data_dir),
               "--checkpoints", str(checkpoint_dir), "--data-version", data_version]
    if run_id:
        command += ["--run-id", run_id]
    env_base = {k: v for k, v in os.environ.items() if k != "MLFLOW_RUN_ID"}  # never inherit a run (mlflow#15713)
    procs = [subprocess.Popen(command, env={**env_base, **env}) for env in rank_environments(config, _free_port())]
    try:
        while any(p.poll() is None for p in procs):
            failed = [(rank, p.returncode) for rank, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed:
                rank, code = failed[0]
                raise TrainingFailed(f"training rank {rank} of {len(procs)} exited with code {code}; the other ranks were stopped")
            time.sleep(poll_seconds)
        failed = [(rank, p.returncode) for rank, p in enumerate(procs) if p.returncode != 0]
        if failed:
            raise TrainingFailed(f"training rank {failed[0][0]} of {len(procs)} exited with code {failed[0][1]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return checkpoint_dir / "model.pt"


def launch(config: FoundryConfig, data_dir: Path, checkpoint_dir: Path, run_id: str | None, data_version: str) -> Path:
    if world_size(config) == 1:
        from tasks.train import train

        return train(config, data_dir, checkpoint_dir, run_id, data_version)
    return launch_local(config, data_dir, checkpoint_dir, run_id, data_version)
