"""`foundry search`: the hyperparameter search flow from the command line. SIGTERM stops it within
`train.preempt_grace_s`: its trials (on Dask workers, this process's children) are ended, and a re-run continues the
study, the trials that were running started over (`foundry.search.study`); `--train-best`'s training after them is
preempted as `foundry run`'s, and resumes."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from foundry.cli.common import config_args, load, summary_text
from foundry.runtime import preemption

SEARCH_RERUN = "the same command continues the study: its finished trials are kept, the running ones start over"


def add_commands(commands) -> None:
    search = commands.add_parser(
        "search",
        help="hyperparameter search over the config's `search` space (the search flow); re-run to continue a study",
    )
    config_args(search)
    search.add_argument("--out", type=Path, metavar="FILE", help="also write the best config to FILE")
    search.add_argument(
        "--train-best", action="store_true", help="then run the whole pipeline with the best config (the usual gate)"
    )
    search.set_defaults(func=cmd_search)


def cmd_search(args: argparse.Namespace) -> int:
    config = load(args)
    preemption.arm(config.train.preempt_grace_s, SEARCH_RERUN)  # a trial keeps no checkpoint to resume from
    from flows.search import search
    from foundry.reports.summaries import search_summary

    result = search(config=config)
    print(search_summary(result))
    if result.best_config is None:
        print("no trial completed: no best config", flush=True)
        return 1
    if args.out:
        shutil.copyfile(result.best_config, args.out)
        print(f"best config also written to {args.out}")
    if args.train_best:
        from flows.train_pipeline import train_pipeline
        from foundry.config import load_config

        best = load_config(result.best_config)
        preemption.arm(best.train.preempt_grace_s)  # now a training that resumes, as `foundry run`'s
        print(summary_text(train_pipeline(config=best)))
    return 0
