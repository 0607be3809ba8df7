"""`foundry evaluate`: registered versions scored on data of one's choice (the evaluate flow)."""

from __future__ import annotations

import argparse

from foundry.cli.common import allow_purged_arg, config_args, load, model_uri, refuse_purged
from foundry.config import ConfigError

DATA_HELP = (
    "a data version (32 hex digits, pulled from data.remote) or a source not yet versioned: a folder, a glob, an "
    "http(s) URL of a file or archive, s3://bucket/prefix, stdlib://PART (prepared with the pipeline's rules, "
    "no split ledger changed); for image classifiers an image data version, a class-per-subfolder folder, an "
    "index or archive, or sklearn://digits (prepared with the first model's image settings)"
)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from foundry.core.redact import keep

    for text in args.models:
        model_uri(text)  # a malformed URI is a usage error, before anything starts
    if not args.data.strip():
        raise ConfigError("--data: give a data version or a source")
    config = load(args)
    refuse_purged(args.models, args.allow_purged, "evaluated")
    from flows.evaluate import evaluate
    from foundry.evaluate.report import comparison

    # A credential in a source URL stays in this process's environment, out of the flow's parameters.
    result = evaluate(models=args.models, data=keep(args.data), config=config, allow_purged=args.allow_purged)
    print(comparison(result))
    return 0


def add_commands(commands) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="score registered versions on a data version or a source, beside the baselines"
    )
    evaluate.add_argument("models", nargs="+", metavar="MODEL_URI", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    evaluate.add_argument(
        "--data", required=True, metavar="DATA_VERSION|DIR|URL|stdlib://PART|sklearn://digits", help=DATA_HELP
    )
    config_args(evaluate)
    allow_purged_arg(evaluate, "evaluate")
    evaluate.set_defaults(func=cmd_evaluate)
