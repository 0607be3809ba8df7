"""`foundry align` and `foundry instructions`: instruction-tuning and preference-optimising a registered model.
SIGTERM to `align` is a preemption (`foundry.runtime.preemption`): a checkpoint, the exit, and the re-run resumes
from it."""

from __future__ import annotations

import argparse
from pathlib import Path

from foundry.align.instructions import TRAIN_PER_TASK
from foundry.cli.common import allow_purged_arg, config_args, load, refuse_purged
from foundry.runtime import preemption


def cmd_align(args: argparse.Namespace) -> int:
    config = load(args)
    refuse_purged([args.model_uri], args.allow_purged, "aligned")
    preemption.arm(config.train.preempt_grace_s)  # its training resumes as the pipeline's: same key, same folder
    from flows.align import align
    from foundry.reports.summaries import align_summary

    print(align_summary(align(model_uri=args.model_uri, config=config, allow_purged=args.allow_purged)))
    return 0


def cmd_instructions(args: argparse.Namespace) -> int:
    from foundry.align.instructions import write_instruction_set

    written = write_instruction_set(args.out, train=args.train, test=args.test, pairs=args.pairs, seed=args.seed)
    for name, path in written.items():
        print(f"{name:6s} {path}")
    return 0


def add_commands(commands) -> None:
    align = commands.add_parser(
        "align", help="instruction-tune (sft) or preference-optimise (dpo) a registered version (the align flow)"
    )
    align.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@ALIAS to start from")
    config_args(align)
    allow_purged_arg(align, "align")
    align.set_defaults(func=cmd_align)

    instructions = commands.add_parser(
        "instructions", help="write the generated instruction set: sft/ and dpo/ records, eval/ held-out sets"
    )
    instructions.add_argument("out", type=Path, help="folder to write into")
    instructions.add_argument("--train", type=int, default=TRAIN_PER_TASK, help="training instances per task (at most)")
    instructions.add_argument("--test", type=int, default=100, help="held-out and out-of-vocabulary instances per task")
    instructions.add_argument("--pairs", type=int, default=1000, help="training preference pairs per task")
    instructions.add_argument("--seed", type=int, default=0)
    instructions.set_defaults(func=cmd_instructions)
