"""`foundry config`: the effective config as commented YAML, or one key explained."""

from __future__ import annotations

import argparse
from pathlib import Path

from foundry.cli.common import config_args, load
from foundry.config import ConfigError, load_config, to_commented_yaml


def add_commands(commands) -> None:
    config = commands.add_parser(
        "config",
        help="print the effective config as YAML, each key's description as a comment, or write it",
        epilog="foundry config --explain train.learning_rate: a key's description, type, default, allowed values "
        "and value; --explain train: every key of a section.",
    )
    config_args(config)
    config.add_argument("--write", type=Path, metavar="FILE", help="write to FILE instead of printing")
    config.add_argument(
        "--explain", metavar="KEY", help="describe KEY (section.key or a section) instead of printing the config"
    )
    config.add_argument(
        "--defaults", action="store_true", help="start from the built-in defaults, ignoring params.yaml"
    )
    config.set_defaults(func=cmd_config)


def cmd_config(args: argparse.Namespace) -> int:
    from foundry.config.describe import UnknownKey, explain

    config = load_config(None, args.overrides) if args.defaults else load(args)
    if args.explain:
        try:
            print(explain(args.explain, config), end="")
        except UnknownKey as exc:
            raise ConfigError(str(exc)) from None
        return 0
    text = to_commented_yaml(config)
    if args.write:
        args.write.write_text(text)
    else:
        print(text, end="")
    return 0
