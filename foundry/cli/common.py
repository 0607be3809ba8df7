"""What every command shares: the --config/--set options, loading the config they name, parsing a MODEL_URI
argument, and the summary a training flow's result prints."""

from __future__ import annotations

import argparse
from pathlib import Path

from foundry.config import ConfigError, FoundryConfig, load_config
from foundry.runtime.env import foundry_home

DEFAULT_CONFIG = Path("params.yaml")


def config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, help="YAML config file (default: ./params.yaml when present, else built-in defaults)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one value, e.g. --set train.max_steps=100 (repeatable)",
    )


def load(args: argparse.Namespace) -> FoundryConfig:
    path = args.config if args.config else (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    return load_config(path, args.overrides)


def model_uri(text: str):
    """A MODEL_URI argument, parsed; a malformed one is a usage error naming the forms accepted."""
    from foundry.core.model_uri import ModelUri

    try:
        return ModelUri.parse(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def summary_text(result) -> str:
    """What `foundry run`, `retrain`, `finetune` and `search --train-best` print at the end."""
    from foundry.reports.summaries import pipeline_summary

    return pipeline_summary(result, foundry_home())
