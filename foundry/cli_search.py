"""`foundry search`: the hyperparameter search flow from the command line (kept apart from foundry/cli.py,
which registers it, for room)."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path


def add_search_command(commands, config_args: Callable, load: Callable, summary: Callable) -> None:
    search = commands.add_parser(
        "search",
        help="hyperparameter search over the config's `search` space (the search flow); re-run to continue a study",
    )
    config_args(search)
    search.add_argument("--out", type=Path, metavar="FILE", help="also write the best config to FILE")
    search.add_argument(
        "--train-best", action="store_true", help="then run the whole pipeline with the best config (the usual gate)"
    )
    search.set_defaults(func=lambda args: cmd_search(args, load, summary))


def cmd_search(args: argparse.Namespace, load: Callable, summary: Callable) -> int:
    config = load(args)
    from flows.search import search

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

        print(summary(train_pipeline(config=load_config(result.best_config))))
    return 0


def search_summary(result) -> str:
    counts = ", ".join(f"{n} {state}" for state, n in sorted(result.counts.items())) or "no trials"
    if result.best_number is None:
        best = ["none (no trial completed)"]
    else:
        best = [f"trial {result.best_number}: {result.best_value:.4f} bits per byte on the holdout"]
        best += [f"{key} = {value}" for key, value in result.best_params.items()]
    lines = [
        "── Foundry search finished ───────────────────────────────────────────",
        f"study      {result.study_name}  ({counts})",
        f"storage    {result.storage}",
        *(f"{'best' if i == 0 else '':10s} {line}" for i, line in enumerate(best)),
        f"config     {result.best_config or '-'}",
        f"MLflow run {result.run_id}  (one nested run per trial; table and plots under search/)",
    ]
    if result.best_config:
        lines.append(f"train it   foundry run --config {result.best_config}")
    return "\n".join(lines)
