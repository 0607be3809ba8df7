"""The training entry point of one process (rank). Every launcher runs this same module under torchrun's agent.

Locally, `foundry.training.launch` runs PyTorch's elastic agent in-process. On a cluster, torchrun on every node:

    # two nodes, one process each (SLURM and Kubernetes templates: see infra/)
    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint $HOST:29500 --rdzv-id $JOB \\
        -m foundry.training.worker --config run_config.json --data /local/hydrated/<version> --checkpoints /shared/ckpt

The agent sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; an uncaught exception is written to
its error file (`@record`), so the launcher reports this rank's traceback, not only its exit code.
A re-launched job resumes from the newest intact checkpoint in --checkpoints (a shared folder). SIGTERM (the agent
passing on a preemption, or a scheduler's) stops every rank at the same step with a checkpoint, within
`train.preempt_grace_s`, and the rank exits with status 143 naming it (`foundry.runtime.preemption`).
Only rank 0 logs to MLflow, to the run id it is given (never one inherited from the environment).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m foundry.training.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="the run's config as JSON")
    parser.add_argument("--data", type=Path, required=True, help="hydrated dataset folder")
    parser.add_argument("--checkpoints", type=Path, required=True, help="checkpoint folder shared by all ranks")
    parser.add_argument("--run-id", default=None, help="MLflow run that rank 0 logs to")
    parser.add_argument("--data-version", default="")
    parser.add_argument(
        "--replay", type=Path, default=None, help="pretraining data an SFT or DPO run replays, as Replay JSON"
    )
    parser.add_argument(
        "--resume-from",
        default="auto",
        metavar="PATH|auto|none",
        help="checkpoint to resume from; auto (default): the newest intact one in --checkpoints",
    )
    return parser


def node_layout(env: Mapping[str, str], devices: int, num_nodes: int) -> dict[str, str]:
    """NODE_RANK and LOCAL_RANK of this rank as Lightning counts them: node-major, `devices` ranks per node.

    torchrun numbers ranks the same way (RANK = node * nproc_per_node + local rank), so on a cluster this
    repeats what it set. Locally one agent runs the ranks of every simulated node, and its LOCAL_RANK
    would run past `devices`; Lightning's LightningEnvironment reads the node's rank from NODE_RANK."""
    world, local_world, rank = int(env["WORLD_SIZE"]), int(env["LOCAL_WORLD_SIZE"]), int(env["RANK"])
    if world != num_nodes * devices:
        raise ValueError(f"{world} ranks started, but the config asks for {num_nodes} nodes x {devices} devices")
    if local_world % devices:
        raise ValueError(f"torchrun started {local_world} processes per node; train.devices is {devices}")
    node, local = divmod(rank, devices)
    return {"NODE_RANK": str(node), "LOCAL_RANK": str(local)}


@record  # an uncaught exception goes to the agent's error file, traceback and all
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from foundry.runtime.env import configure_environment

    configure_environment()  # before the libraries load
    # Never log to a run inherited from whoever started the agent (mlflow#15713): rank 0 logs to --run-id only.
    os.environ.pop("MLFLOW_RUN_ID", None)
    from foundry.config import validate
    from foundry.core.contracts import Replay
    from foundry.training.progress import PROGRESS_FILE
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import join_process_group, train

    config = validate(json.loads(args.config.read_text()))
    from foundry.runtime import preemption

    preemption.arm(config.train.preempt_grace_s)  # before training, SIGTERM ends this rank at once
    if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun's agent, not by hand
        os.environ.update(node_layout(os.environ, config.train.devices, config.train.num_nodes))
        print(
            f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}: node {os.environ['NODE_RANK']}, "
            f"local rank {os.environ['LOCAL_RANK']}",
            file=sys.stderr,
            flush=True,
        )
    resume_from = _resume_point(args.resume_from, args.checkpoints)  # before the group forms: all ranks agree
    join_process_group(config.train)
    # Lightning's MLflow logger is rank-zero-only, so every rank may be handed the run id.
    leader = os.environ.get("RANK", "0") == "0"
    replay = Replay.read(args.replay) if args.replay else None
    run = TrainingRun(args.data, args.checkpoints, args.run_id, args.data_version, resume_from, replay)
    try:
        with preemption.training(args.checkpoints):
            train(
                config,
                run,
                progress=leader and sys.stderr.isatty(),
                progress_file=args.checkpoints / PROGRESS_FILE,  # rank 0's, which the launching task reports
            )
    except preemption.Preempted as stopped:
        print(f"rank {os.environ.get('RANK', '0')}: {stopped}", file=sys.stderr, flush=True)
        return preemption.EXIT_CODE
    return 0


def _resume_point(choice: str, checkpoints: Path) -> Path | None:
    if choice == "none":
        return None
    if choice != "auto":
        return Path(choice)
    from foundry.checkpointing.resume import resume_point

    return resume_point(checkpoints)


if __name__ == "__main__":
    sys.exit(main())
