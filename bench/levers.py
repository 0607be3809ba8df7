"""Levers against the defaults, one at a time, trained in one run through the real trainer.

    python bench/levers.py --lever NAME:KEY=VALUE[,KEY=VALUE...] [--lever ...] [--config params.yaml] [--set k=v ...]

The config (the defaults) is trained first, then each lever: the config with that lever's settings, once each, on
the corpus the pipeline's own code prepares (once per tokenizer setting), scored with the pipeline's holdout metrics
(`bench/defaults.py`'s `prepared` and `train_and_score`). `--set` applies to all. One try each, in this order: the
training times are figures only on a quiet machine, and their ratios only within one run. The last line is the
headline: each lever's holdout bits per byte and training time against the defaults'.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from defaults import against, prepared, train_and_score, warm_up  # noqa: E402  (sets up the environment first)


def parse_lever(text: str) -> tuple[str, list[str]]:
    name, _, settings = text.partition(":")
    if not name or not settings:
        raise argparse.ArgumentTypeError(f"a lever is NAME:KEY=VALUE[,KEY=VALUE...], not {text!r}")
    return name, settings.split(",")


def main() -> int:
    import os

    from foundry.config import load_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=Path("params.yaml"))
    parser.add_argument("--lever", dest="levers", action="append", type=parse_lever, required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    work = Path(os.environ["FOUNDRY_HOME"]) / "bench-levers"
    names = [name for name, _ in args.levers]
    if "defaults" in names or len(set(names)) < len(names):
        parser.error(f"lever names must differ from each other and from 'defaults': {names}")
    configs = {"defaults": load_config(args.config, args.overrides)}
    configs |= {name: load_config(args.config, [*args.overrides, *settings]) for name, settings in args.levers}
    cache: dict = {}
    data = {name: prepared(config, work, cache) for name, config in configs.items()}
    warm_up(configs["defaults"], data["defaults"], work)
    results = {name: train_and_score(name, config, data[name], work, 0) for name, config in configs.items()}
    print("levers: " + against(results, "defaults"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
