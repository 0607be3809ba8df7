"""`foundry gc`: what nothing references any more, listed and sized; deleted with --apply."""

from __future__ import annotations

import argparse

from foundry.cli.common import config_args, load
from foundry.runtime.env import foundry_home


def cmd_gc(args: argparse.Namespace) -> int:
    from foundry.gc import collect

    experiment = load(args).registry.experiment
    home = foundry_home()
    planned = collect.plan(home, experiment, keep_last=args.keep_last, min_age_s=args.min_age_minutes * 60)
    outcome = collect.apply(planned, home) if args.apply else None
    print(collect.summary(planned, outcome))
    return 0


def add_commands(commands) -> None:
    from foundry.gc.items import KEEP_LAST, MIN_AGE_S

    gc = commands.add_parser(
        "gc",
        help="list and size the data versions, hydrated copies, checkpoints, downloads and MLflow runs nothing "
        "references (registered versions, running flows, the last runs); --apply deletes them",
    )
    gc.add_argument(
        "--keep-last", type=int, default=KEEP_LAST, metavar="N", help=f"runs kept however old (default {KEEP_LAST})"
    )
    gc.add_argument(
        "--min-age-minutes",
        type=float,
        default=MIN_AGE_S / 60,
        metavar="M",
        help=f"leave anything changed in the last M minutes: work in progress may own it (default {MIN_AGE_S / 60:g})",
    )
    gc.add_argument("--apply", action="store_true", help="delete them (default: a dry run that deletes nothing)")
    config_args(gc)  # registry.experiment names the runs gc collects
    gc.set_defaults(func=cmd_gc)
