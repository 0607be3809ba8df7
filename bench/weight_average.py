"""Weights averaged over the last steps (`train.average_last`) against the last step's, on a finished default run.

    python bench/weight_average.py --run HOME/runs/RUN_ID/checkpoints --data HOME/hydrated/DATA_VERSION
                                   [--config params.yaml] [--every 5] [--windows 10,25,50,75,100]

A finished `make run` keeps its last two checkpoints (steps 1,250 and 1,350 of the defaults). From the earlier one
this trains on to the end twice through the real trainer: with averaging off (the baseline: the last step's weights,
a checkpoint every `--every` steps) and with `train.average_last` as configured (the saved mean). Both are scored with
the pipeline's holdout metrics, and so is the uniform mean of the baseline's checkpoints over each window of the
last steps (`--windows`, multiples of `--every`): how the gain grows with the window. The last line is the headline.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def trained_on(config, data: Path, start: Path, out: Path) -> Path:
    """Train from checkpoint `start` to `train.max_steps` in `out`; the saved model.pt."""
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    out.mkdir(parents=True)
    shutil.copy(start, out / "start.ckpt")  # the run's own folder stays as it was
    return train(config, TrainingRun(data, out, resume_from=out / "start.ckpt"), progress=False)


def bits_per_byte(weights, model_pt: Path, data: Path, config) -> float:
    """The holdout score of the model at `model_pt` with `weights` (a state dict) in place, if given."""
    import torch

    from foundry.pretrain.holdout_metrics import holdout_metrics
    from models.gpt import load_gpt

    model = load_gpt(model_pt)
    if weights is not None:
        model.load_state_dict({k: v.to(model.state_dict()[k].dtype) for k, v in weights.items()})
    e = config.evaluation
    with torch.no_grad():
        return holdout_metrics(
            model, data / "tokenizer.json", data, e.batch_size, e.max_tokens, e.window_overlap
        ).bits_per_byte


def window_mean(checkpoints: list[Path]) -> dict:
    import torch

    states = [torch.load(p, map_location="cpu", weights_only=False)["state_dict"] for p in checkpoints]
    return {k.removeprefix("model."): sum(s[k].float() for s in states) / len(states) for k in states[0]}


def main() -> int:
    import os

    from foundry.runtime.env import configure_environment

    os.environ.setdefault("FOUNDRY_HOME", str(Path(tempfile.gettempdir()) / "foundry-bench-weight-average"))
    configure_environment()  # before the libraries load
    from foundry.checkpointing.manifest import read_manifest
    from foundry.config import load_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished run's checkpoints folder")
    parser.add_argument("--data", type=Path, required=True, help="the hydrated data version it trained on")
    parser.add_argument("--config", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--windows", default="10,25,50,75,100")
    args = parser.parse_args()
    config = load_config(args.config)
    earlier = sorted(read_manifest(args.run), key=lambda e: e.step)[-2]
    start = args.run / earlier.file
    with tempfile.TemporaryDirectory() as tmp:
        last = load_config(
            args.config, ["train.average_last=0", f"checkpoint.every_n_steps={args.every}", "checkpoint.keep_last=1000"]
        )
        baseline = trained_on(last, args.data, start, Path(tmp) / "last")
        averaged = trained_on(config, args.data, start, Path(tmp) / "mean")
        scores = {"last step": bits_per_byte(None, baseline, args.data, config)}
        steps = sorted(e.step for e in read_manifest(baseline.parent))
        for window in [int(w) for w in args.windows.split(",")]:
            kept = [baseline.parent / f"step-{s:06d}.ckpt" for s in steps[-(window // args.every) :]]
            scores[f"mean of the last {window} steps, every {args.every}th"] = bits_per_byte(
                window_mean(kept), baseline, args.data, config
            )
        mean = bits_per_byte(None, averaged, args.data, config)
    for name, score in scores.items():
        print(f"{name}: {score:.4f} bits/byte")
    # From a checkpoint inside the window the mean starts with the step after it.
    n, base = min(config.train.averaged_steps, config.train.max_steps - earlier.step), scores["last step"]
    print(f"weight_average: last step {base:.4f} bits/byte, mean of the last {n} steps {mean:.4f} ({mean - base:+.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
