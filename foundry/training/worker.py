"""The training entry point of one process (rank). Every launcher runs this same module.

Locally, `foundry.training.launch` starts one per rank. On a cluster:

    # two nodes, one process each, with torchrun
    torchrun --nnodes 2 --nproc-per-node 1 --node-rank $NODE_RANK --master-addr $HOST --master-port 29500 \\
        -m foundry.training.worker --config run_config.json --data /local/hydrated/<version> --checkpoints /shared/ckpt

    # or SLURM: srun sets the rank variables, see infra/

The rendezvous comes from MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK and LOCAL_RANK.
A re-launched job resumes from the newest intact checkpoint in --checkpoints (a shared folder).
Only rank 0 logs to MLflow, to the run id it is given (never one inherited from the environment).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foundry.training.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="the run's config as JSON")
    parser.add_argument("--data", type=Path, required=True, help="hydrated dataset folder")
    parser.add_argument("--checkpoints", type=Path, required=True, help="checkpoint folder shared by all ranks")
    parser.add_argument("--run-id", default=None, help="MLflow run that rank 0 logs to")
    parser.add_argument("--data-version", default="")
    parser.add_argument(
        "--resume-from",
        default="auto",
        metavar="PATH|auto|none",
        help="checkpoint to resume from; auto (default): the newest intact one in --checkpoints",
    )
    args = parser.parse_args(argv)

    from foundry.env import configure_environment

    configure_environment()  # before the libraries load
    from foundry.config import validate
    from foundry.training.trainer import train

    config = validate(json.loads(args.config.read_text()))
    resume_from = _resume_point(args.resume_from, args.checkpoints)
    # Lightning's MLflow logger is rank-zero-only, so every rank may be handed the run id.
    leader = os.environ.get("RANK", "0") == "0"
    train(
        config,
        args.data,
        args.checkpoints,
        run_id=args.run_id,
        data_version=args.data_version,
        progress=leader and sys.stderr.isatty(),
        resume_from=resume_from,
    )
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
