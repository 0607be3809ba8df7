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
    """`PurgedModel` naming the purge record for the first of `uris` a purge tagged, unless `allowed`; what each
    alias names now is what is checked, and a registry that cannot be read stops the command (fail closed)."""
    if allowed:
        return
    from mlflow.exceptions import MlflowException

    from foundry.registry.versions import absent, resolve
    from foundry.registry.versions import refuse_purged as refuse

    hint = "; to use it anyway (it was kept with `purge --apply --keep-models`), pass --allow-purged"
    for uri in uris:
        try:
            version = resolve(str(model_uri(uri)))
        except MlflowException as exc:
            if absent(exc):  # the command's own message: an input error, named, not MLflow's
                raise LookupError(f"{uri}: the registry has no such version or alias; nothing was {refused}") from exc
            raise
        refuse(version, refused, hint)


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
