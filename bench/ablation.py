"""What each of the defaults' two model changes gives: positions (learned, rotary) x optimizer (adamw, muon).

    python bench/ablation.py [--config params.yaml] [--set k=v ...]

The config is trained four times, at its own steps and settings, once with each combination of
`model.positions` and `train.optimizer`, on the corpus prepared once by the pipeline's own code, and scored
with the pipeline's holdout metrics (`bench/defaults.py`'s `prepared` and `train_and_score`). The first
combination, learned positions with AdamW, is the baseline: the architecture and optimizer of every default
before issue 15's rotary positions and Muon. `--set` applies to all four (e.g. `--set train.max_steps=400` for a shorter run). The last line is
the headline: each combination's holdout bits per byte and training time against the baseline's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from defaults import against, prepared, train_and_score, warm_up  # noqa: E402  (sets up the environment first)

COMBINATIONS = [("learned", "adamw"), ("rotary", "adamw"), ("learned", "muon"), ("rotary", "muon")]


def main() -> int:
    import os

    from foundry.config import load_config
    from foundry.config.training import ADAMW_LEARNING_RATE

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=Path("params.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    work = Path(os.environ["FOUNDRY_HOME"]) / "bench-ablation"
    # AdamW over every weight at the rate measured for it; the default rate is Muon's share's.
    adamw_rate = {"adamw": [f"train.learning_rate={ADAMW_LEARNING_RATE}"], "muon": []}
    configs = {
        f"{positions}+{optimizer}": load_config(
            args.config,
            [*adamw_rate[optimizer], *args.overrides, f"model.positions={positions}", f"train.optimizer={optimizer}"],
        )
        for positions, optimizer in COMBINATIONS
    }
    first = next(iter(configs.values()))
    data = prepared(first, work, {})  # the combinations change neither the data nor the tokenizer
    warm_up(first, data, work)
    results = {name: train_and_score(name, config, data, work, 0) for name, config in configs.items()}
    print("ablation: " + against(results, "learned+adamw"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
