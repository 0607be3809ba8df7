"""Starting the training processes: in this process for one rank, else one process per rank.

Each process gets the standard rendezvous variables, exactly as torchrun or SLURM would set them,
so the local launch exercises the same code path as a cluster. Either way training resumes from
the newest intact checkpoint in the folder, chosen once here so every rank starts from the same one.
"""

from __future__ import annotations

import os
import signal
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
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(world_size(config)),
            "NODE_RANK": str(node),
            "LOCAL_RANK": str(local),
            "RANK": str(node * t.devices + local),
        }
        for node in range(t.num_nodes)
        for local in range(t.devices)
    ]


def worker_command(
    config: FoundryConfig,
    data_dir: Path,
    checkpoint_dir: Path,
    run_id: str | None,
    data_version: str,
    resume_from: Path | None,
) -> list[str]:
    """`python -m foundry.training.worker ...` for every rank; the config travels as a JSON file."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    config_path = checkpoint_dir / "train_config.json"
    config_path.write_text(config.model_dump_json())
    command = [
        sys.executable,
        "-m",
        "foundry.training.worker",
        "--config",
        str(config_path),
        "--data",
        str(data_dir),
        "--checkpoints",
        str(checkpoint_dir),
        "--data-version",
        data_version,
    ]
    command += ["--run-id", run_id] if run_id else []
    return command + ["--resume-from", str(resume_from) if resume_from else "none"]


def start_ranks(config: FoundryConfig, command: list[str]) -> list[subprocess.Popen]:
    env_base = {k: v for k, v in os.environ.items() if k != "MLFLOW_RUN_ID"}  # never inherit a run (mlflow#15713)
    return [subprocess.Popen(command, env={**env_base, **env}) for env in rank_environments(config, _free_port())]


def _describe(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


def _first_failure(procs: list[subprocess.Popen], poll_seconds: float) -> int | None:
    """The rank that failed first, or None once all succeeded. A rank killed by a signal is the
    likelier cause than one that exited with an error in the same instant, so it is named first."""
    while True:
        codes = [p.poll() for p in procs]
        failed = sorted((code > 0, rank) for rank, code in enumerate(codes) if code not in (None, 0))
        if failed:
            return failed[0][1]
        if all(code == 0 for code in codes):
            return None
        time.sleep(poll_seconds)


def supervise(procs: list[subprocess.Popen], poll_seconds: float = 0.5, grace_seconds: float = 10.0) -> None:
    """Wait for every rank. After a failure the others get `grace_seconds` to end on their own
    (the collective timeout ends a group whose peer died), then they are stopped."""
    try:
        failed = _first_failure(procs, poll_seconds)
        if failed is None:
            return
        deadline = time.monotonic() + grace_seconds
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(poll_seconds)
        others = [
            f"rank {rank} {_describe(p.returncode)}"
            if p.returncode is not None
            else f"rank {rank} was still running after {grace_seconds:g} s and was stopped"
            for rank, p in enumerate(procs)
            if rank != failed
        ]
        raise TrainingFailed(
            f"training rank {failed} of {len(procs)} {_describe(procs[failed].returncode)}"
            + (f"; then {', '.join(others)}" if others else "")
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def check_replicas(checkpoint_dir: Path, n_ranks: int) -> None:
    """Data parallel replicas must end bitwise equal; a difference is a bug, not noise."""
    digests = {rank: (checkpoint_dir / f"weights.rank{rank}.sha256") for rank in range(n_ranks)}
    found = {rank: path.read_text().strip() for rank, path in digests.items() if path.is_file()}
    if len(set(found.values())) > 1:
        raise TrainingFailed(f"ranks ended with different weights: {found}")


def launch_local(
    config: FoundryConfig,
    data_dir: Path,
    checkpoint_dir: Path,
    run_id: str | None,
    data_version: str,
    resume_from: Path | None = None,
    poll_seconds: float = 0.5,
) -> Path:
    """Run all ranks on this machine and wait; if one fails, stop the rest and say which."""
    for stale in checkpoint_dir.glob("weights.rank*.sha256"):
        stale.unlink()
    procs = start_ranks(config, worker_command(config, data_dir, checkpoint_dir, run_id, data_version, resume_from))
    supervise(procs, poll_seconds)
    check_replicas(checkpoint_dir, len(procs))
    return checkpoint_dir / "model.pt"


def launch(config: FoundryConfig, data_dir: Path, checkpoint_dir: Path, run_id: str | None, data_version: str) -> Path:
    """Train into `checkpoint_dir`, resuming from its newest intact checkpoint if a previous try left one."""
    from foundry.checkpointing.resume import resume_point

    resume_from = resume_point(checkpoint_dir)
    if world_size(config) == 1:
        from foundry.training.trainer import train

        return train(config, data_dir, checkpoint_dir, run_id, data_version, resume_from=resume_from)
    return launch_local(config, data_dir, checkpoint_dir, run_id, data_version, resume_from)
