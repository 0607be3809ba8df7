"""`foundry`: the command line, one module per domain. Heavy libraries are imported inside each command, so
`--help` is instant.

- common: --config/--set, loading the config, MODEL_URI arguments, the training flows' summary
- pipeline: run, retrain, reproduce
- data: acquire, prepare (the DVC stages), hydrate
- registry: promote, reregister, lineage
- ops: up, serve, doctor, plan, deployments
- config: config (--explain, --defaults, --write)
- search: search
- specialists: finetune, merge
- align: align, instructions
"""

from __future__ import annotations

import argparse
import sys

from foundry.cli import align, config, data, ops, pipeline, registry, search, specialists
from foundry.config import ConfigError
from foundry.env import configure_environment

DOMAINS = (pipeline, ops, data, registry, config, align, search, specialists)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foundry",
        description="Raw text to a trained, validated, registered model.",
        epilog="State lives under $FOUNDRY_HOME (default ./.foundry). Set MLFLOW_TRACKING_URI or "
        "PREFECT_API_URL to use servers instead of the embedded defaults.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for domain in DOMAINS:
        domain.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_environment()
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("foundry: interrupted", file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"foundry: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # one paragraph for people; the traceback is in the Prefect/MLflow logs
        kind = type(exc).__name__
        print(f"foundry: {args.command} failed ({kind}): {exc}", file=sys.stderr)
        return 1
