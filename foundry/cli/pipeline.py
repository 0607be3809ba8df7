"""`foundry run`, `retrain` and `reproduce`: the training flows from the command line. SIGTERM to `run` or `retrain`
is a preemption (`foundry.runtime.preemption`): a checkpoint, then the exit, within `train.preempt_grace_s`. SIGTERM
to `reproduce`, which trains from scratch on purpose, stops its training at the next step within the default grace
(the recorded config is read later) and says the re-run starts over; a reproduction registers nothing."""

from __future__ import annotations

import argparse

from foundry.cli.common import allow_purged_arg, config_args, load, refuse_purged, summary_text
from foundry.config import TrainConfig
from foundry.runtime import preemption

REPRODUCE_RERUN = "a reproduction trains from scratch: the same command starts it over"


def cmd_run(args: argparse.Namespace) -> int:
    config = load(args)
    preemption.arm(config.train.preempt_grace_s)
    from flows.train_pipeline import train_pipeline

    print(summary_text(train_pipeline(config=config)))
    return 0


def cmd_retrain(args: argparse.Namespace) -> int:
    config = load(args)
    preemption.arm(config.train.preempt_grace_s)
    from flows.retrain import retrain
    from foundry.core.contracts import SkippedRun

    result = retrain(config=config)
    if isinstance(result, SkippedRun):
        from foundry.reports.summaries import skipped_summary

        print(skipped_summary(result))
    else:
        print(summary_text(result) + f"\nparent     {result.parent}")
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    refuse_purged([args.model_uri], args.allow_purged, "reproduced")  # it would train on the purged documents again
    preemption.arm(TrainConfig.model_fields["preempt_grace_s"].default, REPRODUCE_RERUN)
    from flows.reproduce import reproduce
    from foundry.reports.summaries import reproduce_summary

    result = reproduce(model_uri=args.model_uri, force=args.force, allow_purged=args.allow_purged)
    print(reproduce_summary(result))
    return 0 if result.identical else 1


def add_commands(commands) -> None:
    run = commands.add_parser("run", help="run the whole pipeline flow (train_pipeline)")
    config_args(run)
    run.set_defaults(func=cmd_run)

    retrain = commands.add_parser("retrain", help="fine-tune the champion on what is new in its source (retrain flow)")
    config_args(retrain)
    retrain.set_defaults(func=cmd_retrain)

    reproduce = commands.add_parser("reproduce", help="hydrate a model's data version and re-train it with its config")
    reproduce.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    reproduce.add_argument("--force", action="store_true", help="re-train even when the code's commit differs")
    allow_purged_arg(reproduce, "reproduce")
    reproduce.set_defaults(func=cmd_reproduce)
