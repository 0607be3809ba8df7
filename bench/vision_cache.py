"""Decoded images kept by the training loader (`image.decoded_cache_mb`) against decoding every epoch, on the
digits, through the real trainer: our training alone, no plain loop beside it (bench/vision.py interleaves one).

    python bench/vision_cache.py [--steps 300] [--workers 0 2] [--kept-mb 128]

For each number of loader processes (`image.loader_workers`), `--steps` steps of `foundry.training.trainer.train`
on the hydrated digits of `configs/vision.yaml` (1,330 training images, 20 batches of 64 an epoch; validation and
checkpoints between steps off) with `image.decoded_cache_mb` 0 (the baseline: every epoch decoded) and
`--kept-mb`, in the order A B B A, the first 20 steps of each run left out. Per step, means over both runs of a
setting: the step (`on_train_batch_start` to `on_train_batch_end`), the time between steps (from one step's end
to the next one's start: the loader's next batch and Lightning's loop, what `LitVision` logs as
`train/data_wait_ms`) and, within it, the loader's own `next()`. The last line is the headline.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import vision  # noqa: E402  (sets FOUNDRY_HOME to its work folder and configures the environment)

# isort: split
import lightning as L  # noqa: E402
import torch  # noqa: E402

from foundry.config import load_config  # noqa: E402
from foundry.runtime.arithmetic import cpu_threads  # noqa: E402
from foundry.training.run import TrainingRun  # noqa: E402
from foundry.training.trainer import train  # noqa: E402

SKIP = 20


class Steps(L.Callback):
    """Each step's time and the time from the previous step's end to its start."""

    def __init__(self):
        self.steps, self.between, self.started, self.ended = [], [], 0.0, None

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.started = time.perf_counter()
        if self.ended is not None:
            self.between.append(self.started - self.ended)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.ended = time.perf_counter()
        self.steps.append(self.ended - self.started)


def one_run(data_dir: Path, steps: int, workers: int, kept_mb: int, clock) -> dict[str, list[float]]:
    config = load_config(
        REPO / "configs" / "vision.yaml",
        [
            f"train.max_steps={steps}",
            "train.val_every_n_steps=1000000",
            "checkpoint.every_n_steps=1000000",
            f"image.loader_workers={workers}",
            f"image.decoded_cache_mb={kept_mb}",
        ],
    )
    torch.set_num_threads(cpu_threads(config.train))  # the trainer sets the same
    shutil.rmtree(vision.WORK / "checkpoints", ignore_errors=True)
    clock.fetches = []
    timing = Steps()
    train(config, TrainingRun(data_dir, vision.WORK / "checkpoints"), progress=False, callbacks=(timing,))
    return {
        "step": timing.steps[SKIP:],
        "between": timing.between[SKIP:],
        "next": [took for _, took in clock.fetches][SKIP:],
    }


def _per_step(runs: list[dict[str, list[float]]]) -> dict[str, float]:
    """Milliseconds a step of each measure, over the runs' steps (an epoch's last `next()`, which ends it, is one
    more fetch than steps)."""
    steps = sum(len(run["step"]) for run in runs)
    return {k: 1000 * sum(v for run in runs for v in run[k]) / steps for k in ("step", "between", "next")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--kept-mb", type=int, default=128, help="image.decoded_cache_mb of the candidate")
    args = parser.parse_args()
    clock = vision.LoaderClock()  # each `next()` on our loader, timed within `with clock`
    try:
        default = load_config(REPO / "configs" / "vision.yaml", [])
        data_dir, _ = vision.hydrate_side(default, "digits", vision.prepare_side(default, "digits", 1), 1)
        headline = []
        for workers in args.workers:
            runs = {0: [], args.kept_mb: []}
            for kept in (0, args.kept_mb, args.kept_mb, 0):
                with clock:
                    runs[kept].append(one_run(data_dir, args.steps, workers, kept, clock))
            per_step = {kept: _per_step(done) for kept, done in runs.items()}
            for kept, ms in per_step.items():
                whole = ms["step"] + ms["between"]
                print(
                    f"{workers} loader workers, {kept} MiB kept: step {ms['step']:.2f} ms, between steps "
                    f"{ms['between']:.2f} ms ({100 * ms['between'] / whole:.1f}%), of it the loader's next "
                    f"{ms['next']:.2f} ms ({100 * ms['next'] / whole:.1f}%)",
                    flush=True,
                )
            base, kept = per_step[0], per_step[args.kept_mb]
            speed = (base["step"] + base["between"]) / (kept["step"] + kept["between"])
            headline.append(
                f"{workers} workers {speed:.2f}x (loader's next {100 * kept['next'] / (kept['step'] + kept['between']):.1f}% "
                f"of a step, {100 * base['next'] / (base['step'] + base['between']):.1f}% decoding every epoch)"
            )
        print(f"vision_cache: {args.kept_mb} MiB of decoded digits kept against none, per step: " + "; ".join(headline))
    finally:
        shutil.rmtree(vision.WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
