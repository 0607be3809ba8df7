"""Does a config train the same weights twice? Two trainings, each in a fresh process with an empty compile cache.

    python bench/determinism.py [--config params.yaml] [--steps 60] [--set k=v ...]

The corpus is prepared by the pipeline's own code (`bench/defaults.py`'s `prepared`), then the config trains
`--steps` steps twice (`bench/defaults.py`'s `timed_training`, as `foundry run`'s training child on a fresh home);
the last line is the headline: whether the two model.pt files hold bitwise the same weights, with their digests.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from defaults import prepared, timed_training  # noqa: E402  (sets up the environment first)


def digest_of(model_pt: Path) -> str:
    from foundry.training.trainer import weights_digest
    from models.gpt import load_gpt

    return weights_digest(load_gpt(model_pt).state_dict())[:16]


def main() -> int:
    from foundry.config import load_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=Path("params.yaml"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    config = load_config(args.config, [*args.overrides, f"train.max_steps={args.steps}"])
    work = Path(os.environ["FOUNDRY_HOME"]) / "bench-determinism"
    data = prepared(config, work, {})
    digests = []
    for attempt in range(2):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
            model_pt, seconds = child.submit(timed_training, config, data, work / f"try-{attempt}").result()
        digests.append(digest_of(model_pt))
        print(f"try {attempt}: {seconds:.1f} s training, weights {digests[-1]}", flush=True)
    verdict = "the same weights" if digests[0] == digests[1] else "DIFFERENT weights"
    print(f"determinism: {verdict} after {args.steps} steps ({' vs '.join(digests)})")
    return 0 if digests[0] == digests[1] else 1


if __name__ == "__main__":
    sys.exit(main())
