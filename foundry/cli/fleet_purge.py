"""`foundry purge`: every copy of the documents a deletion request names, and every version trained on them
(a dry run; `--apply` is not implemented yet and refuses)."""

from __future__ import annotations

import argparse
import sys

from foundry.cli.common import config_args, load
from foundry.config import ConfigError
from foundry.env import foundry_home


def cmd_purge(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from foundry.fleet import purge

    if args.apply:  # before anything is read: nothing may look as if it had been removed
        print(f"foundry purge --apply: {purge.REFUSAL}; nothing was removed", file=sys.stderr)
        return 2
    kind, value = next((k, getattr(args, k)) for k in ("match", "document", "source") if getattr(args, k))
    try:
        criterion = purge.Criterion(kind=kind, value=value)
    except ValidationError as exc:  # its own message, without the value (a regex may be the name to forget)
        raise ConfigError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
    config = load(args)
    remotes = {config.data.remote} if config.data.remote else set()
    found = purge.plan(foundry_home(), criterion, args.reason, remotes=remotes)
    print(found.model_dump_json(indent=1) if args.json else purge.summary(found))
    return 0


def add_commands(commands) -> None:
    purge = commands.add_parser(
        "purge",
        help="find every copy of the documents a deletion request names (data versions in the DVC cache and "
        "remote, hydrated copies, token shards, MLflow artifacts) and every registered version trained on them",
    )
    which = purge.add_mutually_exclusive_group(required=True)
    which.add_argument("--match", metavar="REGEX", help="documents whose text the regular expression matches")
    which.add_argument("--document", metavar="SHA256", help="one document by its sha256 (documents.csv, ledger.csv)")
    which.add_argument("--source", metavar="PATH", help="the documents read from one source file (as named there)")
    purge.add_argument("--reason", required=True, metavar="TEXT", help="why: kept in the purge record")
    purge.add_argument("--json", action="store_true", help="print the plan as JSON (ids and counts, never text)")
    purge.add_argument("--apply", action="store_true", help="remove them: not implemented yet (refuses)")
    config_args(purge)  # data.remote is one more DVC remote to look in
    purge.set_defaults(func=cmd_purge)
