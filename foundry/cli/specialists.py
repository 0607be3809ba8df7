"""`foundry finetune` and `foundry merge`: specialising a registered model and merging specialists. SIGTERM to
`finetune` is a preemption (`foundry.runtime.preemption`): a checkpoint, the exit, and the re-run resumes from it."""

from __future__ import annotations

import argparse

from foundry.cli.common import allow_purged_arg, config_args, load, refuse_purged, summary_text
from foundry.runtime import preemption


def add_commands(commands) -> None:
    finetune = commands.add_parser(
        "finetune", help="specialise a registered version on the configured data source (the finetune flow)"
    )
    finetune.add_argument("model", metavar="MODEL_URI", help="models:/NAME/VERSION or models:/NAME@ALIAS to start from")
    config_args(finetune)
    allow_purged_arg(finetune, "fine-tune")
    finetune.set_defaults(func=cmd_finetune)
    merge = commands.add_parser(
        "merge", help="merge two or more registered versions of one architecture by their parameters (no training)"
    )
    merge.add_argument("models", nargs="+", metavar="MODEL_URI", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    config_args(merge)
    merge.add_argument("--method", choices=("linear", "task_arithmetic", "ties", "dare_ties"), help="merge.method")
    merge.add_argument("--base", metavar="MODEL_URI", help="merge.base (default: the models' common ancestor)")
    merge.add_argument("--weights", type=float, nargs="+", metavar="W", help="merge.weights, one per model")
    merge.add_argument("--force", action="store_true", help="merge onto --base even if it is not their ancestor")
    allow_purged_arg(merge, "merge")
    merge.set_defaults(func=cmd_merge)


def cmd_finetune(args: argparse.Namespace) -> int:
    config = load(args)
    refuse_purged([args.model], args.allow_purged, "fine-tuned")
    preemption.arm(config.train.preempt_grace_s)  # its training resumes as the pipeline's: same key, same folder
    from flows.finetune import finetune

    result = finetune(model=args.model, config=config, allow_purged=args.allow_purged)
    print(summary_text(result) + f"\nparent     {result.parent}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """The options are shorthands for `--set merge.KEY=VALUE`; they win over the config file and --set."""
    shorthands = {"method": args.method, "base": args.base, "weights": args.weights, "force": args.force or None}
    args.overrides += [f"merge.{key}={value}" for key, value in shorthands.items() if value is not None]
    config = load(args)
    refuse_purged([*args.models, *([args.base] if args.base else [])], args.allow_purged, "merged")
    from flows.merge import merge
    from foundry.reports.summaries import merge_summary

    print(merge_summary(merge(models=args.models, config=config, allow_purged=args.allow_purged)))
    return 0  # refused by the gate is an outcome (a challenger), as for `foundry run`
