"""`foundry promote`, `reregister` and `lineage`: a reviewer's work on the model registry."""

from __future__ import annotations

import argparse
import json

from foundry.cli.common import model_uri
from foundry.core.model_uri import ModelUri
from foundry.runtime.env import foundry_home


def cmd_promote(args: argparse.Namespace) -> int:
    import getpass

    from foundry.registry.versions import promote_manually
    from tasks.locks import promotion_lock

    name = model_uri(args.model_uri).name
    with promotion_lock(name, foundry_home()):  # not while a flow judges and publishes the same model
        record = promote_manually(args.model_uri, args.reason, args.who or getpass.getuser())
    print(
        f"{ModelUri(name=record['name'], version=str(record['version']))} is now champion "
        f"(was: {record['replaced_champion'] or 'none'}; by {record['promoted_by']}: {record['promotion_reason']})"
    )
    return 0


def cmd_reregister(args: argparse.Namespace) -> int:
    from foundry.registry.versions import reregister

    name = model_uri(args.model_uri).name
    version = reregister(args.model_uri, foundry_home())
    print(
        f"{ModelUri(name=name, version=version)} holds the weights of {args.model_uri} and carries its code; aliases unchanged"
    )
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from foundry.registry.lineage import format_lineage, lineage

    chain = lineage(args.model_uri)
    print(json.dumps([r.model_dump() for r in chain], indent=1) if args.json else format_lineage(chain))
    return 0


def add_commands(commands) -> None:
    promote = commands.add_parser("promote", help="make a model version champion after review, recording who and why")
    promote.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@challenger")
    promote.add_argument("--reason", required=True, help="why it is promoted (kept as a version tag)")
    promote.add_argument("--who", help="reviewer (default: the current user)")
    promote.set_defaults(func=cmd_promote)

    reregister = commands.add_parser(
        "reregister", help="register a version's weights again as a new version that carries its own code"
    )
    reregister.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    reregister.set_defaults(func=cmd_reregister)

    lineage = commands.add_parser(
        "lineage", help="print a model's chain: version, run, data, source, commit, config, parent"
    )
    lineage.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    lineage.add_argument("--json", action="store_true", help="machine-readable output")
    lineage.set_defaults(func=cmd_lineage)
