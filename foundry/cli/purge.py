"""`foundry purge`: every copy of the documents a deletion request names, and every version trained on them; a
dry run unless `--apply`, which removes them everywhere and keeps a purge record (`foundry.purge.apply`)."""

from __future__ import annotations

import argparse
import sys

from foundry.cli.common import config_args, load
from foundry.config import ConfigError
from foundry.runtime.env import foundry_home


def cmd_purge(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from foundry.purge import apply as purge_apply
    from foundry.purge import record as purge_record
    from foundry.purge import search

    if args.retrain and not args.apply:
        raise ConfigError("--retrain trains on the purged data: it needs --apply")
    kind, value = next((k, getattr(args, k)) for k in ("match", "document", "source") if getattr(args, k))
    try:
        criterion = search.Criterion(kind=kind, value=value)
    except ValidationError as exc:  # its own message, without the value (a regex may be the name to forget)
        raise ConfigError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
    config = load(args)
    remotes = {config.data.remote} if config.data.remote else set()
    if not args.apply:
        found = search.plan(foundry_home(), criterion, args.reason, remotes=remotes)
        print(found.model_dump_json(indent=1) if args.json else search.summary(found))
        return 0
    try:
        record = purge_apply.apply(foundry_home(), criterion, args.reason, remotes, keep_models=args.keep_models)
    except purge_apply.PurgeRefused as exc:
        print(f"foundry purge --apply: {exc}", file=sys.stderr)
        return 2
    if record is None:
        print(
            "nothing left to remove: nothing was removed and no record was made (the dry run lists what a store keeps that it cannot change)"
        )
        return 0
    print(purge_record.as_json(record) if args.json else purge_record.summary(record))
    retrained = _retrain(record) if args.retrain else 0
    return retrained if record.verified else 1  # not verified: the purge is to be run again, whatever retrained


def _retrain(record) -> int:
    """Retrain each affected name trained from scratch; then list each version built from one (a fine-tune, a
    merge, an alignment) with the command that rebuilds it on its retrained parent, and return
    `REBUILDS_LEFT` while any is: the purge is not finished until they are rebuilt or retired."""
    from foundry.purge import retrain as purge_retrain
    from foundry.runtime.tracking import client

    jobs = purge_retrain.plan(record, client())
    for line in jobs.not_retrained:
        print(f"not retrained: {line}")
    retrained: dict[str, str] = {}
    if jobs.jobs:
        from flows.purge import retrain_purged

        for job in jobs.jobs:
            result = retrain_purged(job)
            print(f"retrained {job.name} on {job.data.data_version}: {result.model_uri or 'not registered'}")
            if result.model_uri:
                retrained[job.name] = result.model_uri
    if not jobs.rebuilds:
        return 0
    print(f"not rebuilt: {len(jobs.rebuilds)} version(s) built from a purged one; rebuild each by hand, in this order")
    for line in purge_retrain.commands(jobs, record, retrained):
        print(f"  {line}")
    print(f"  ({purge_retrain.CONFIG_LEGEND})")
    print(
        f"foundry purge --retrain: {len(jobs.rebuilds)} derived version(s) still to rebuild (listed above); "
        f"exit status {purge_retrain.REBUILDS_LEFT}",
        file=sys.stderr,
    )
    return purge_retrain.REBUILDS_LEFT


def add_commands(commands) -> None:
    purge = commands.add_parser(
        "purge",
        help="find every copy of the documents a deletion request names (data versions in the DVC cache and "
        "remote, hydrated copies, token shards, MLflow artifacts, run files, Prefect artifacts, Prefect's and MLflow's "
        "own records: parameters, state messages, logs, events, params, tags, dataset inputs, descriptions) and every "
        "registered version trained on them; --apply removes them and keeps a purge record",
    )
    which = purge.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--match",
        metavar="REGEX",
        help="documents whose text the regular expression matches; in an image dataset, images whose label or "
        "source path it matches (pixels are never read as text)",
    )
    which.add_argument(
        "--document",
        metavar="SHA256",
        help="one document by its sha256 (documents.csv, ledger.csv); an image by the sha256 images.csv and "
        "ledger.csv record, of its decoded, fitted pixels (not of the source file's bytes)",
    )
    which.add_argument(
        "--source",
        metavar="PATH",
        help="the documents (or the image) read from one source file, as documents.csv (images.csv) names it",
    )
    purge.add_argument("--reason", required=True, metavar="TEXT", help="why: kept in the purge record")
    purge.add_argument("--json", action="store_true", help="print the plan (or the record) as JSON: ids and counts")
    purge.add_argument("--apply", action="store_true", help="remove them everywhere and keep a purge record")
    purge.add_argument(
        "--keep-models", action="store_true", help="with --apply: affected versions keep `champion` (and serving)"
    )
    purge.add_argument(
        "--retrain",
        action="store_true",
        help="with --apply: train each affected name again on the purged data; versions built from an affected one "
        "(fine-tunes, merges, alignments) are listed, parents first, with the command that rebuilds each on its "
        "retrained parent, and the command then exits 3",
    )
    config_args(purge)  # data.remote is one more DVC remote to look in
    purge.set_defaults(func=cmd_purge)
