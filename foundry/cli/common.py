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


def allow_purged_arg(parser: argparse.ArgumentParser, doing: str) -> None:
    """`--allow-purged`: a version a purge tagged is refused by every command that reads it, unless the user says
    so (a version kept with `foundry purge --apply --keep-models`)."""
    parser.add_argument(
        "--allow-purged",
        action="store_true",
        help=f"{doing} a version tagged `foundry.purge` (trained on documents a purge removed; refused by default): "
        "for a version kept with `foundry purge --apply --keep-models`",
    )


def refuse_purged(uris: list[str], allowed: bool, refused: str) -> None:
    """`PurgedModel` naming the purge record for the first of `uris` a purge tagged, unless `allowed`
    (`foundry.registry.versions.refuse_purged_versions`, which the flows run too): checked here as well so that
    the command fails before a flow starts. Each URI is parsed first: a malformed one is a usage error."""
    from foundry.registry.versions import refuse_purged_versions

    refuse_purged_versions([str(model_uri(uri)) for uri in uris], refused, allowed)


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
