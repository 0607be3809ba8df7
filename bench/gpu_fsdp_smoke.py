"""The tiny twin trained on one GPU under FSDP in bf16, through `foundry.training.launch` as the pipeline runs it.

    python bench/gpu_fsdp_smoke.py DATA_DIR [--steps 40]
    python bench/gpu_fsdp_smoke.py DATA_DIR --cpu   # the same steps on the CPU without FSDP: checks the script

DATA_DIR is a dataset prepared with configs/tiny.yaml (e.g. the `prepared/` folder `foundry run --config
configs/tiny.yaml` leaves, copied where the GPU is). Three things are checked, each printed:
- training runs under FSDPStrategy with NCCL and bf16-mixed, and writes checkpoints and model.pt;
- model.pt rebuilds on the CPU, and its holdout loss is below the untrained model's;
- after the newest checkpoint is cut short, the same command resumes from the one before it;
  whether the resumed weights equal the uninterrupted run's bit for bit is printed, not asserted
  (train.deterministic is on; bf16 and NCCL make no such promise).
Without a CUDA device (and without --cpu) it says so and exits 1. The last line is the headline.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def holdout_loss(model, data_dir: Path, block_size: int) -> float:
    import torch

    from foundry.pretrain.shards import load_split
    from models.data import SequentialWindows

    model.eval()
    losses = []
    with torch.no_grad():
        for x, y in SequentialWindows(load_split(data_dir, "holdout"), block_size, 8, max_batches=8):
            losses.append(model(x, y)[1].item())
    return sum(losses) / len(losses)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--cpu", action="store_true", help="no GPU, no FSDP: checks the script, measures nothing")
    args = parser.parse_args()
    if "FOUNDRY_HOME" not in os.environ:  # a folder made only when used: setdefault would make one every run
        os.environ["FOUNDRY_HOME"] = tempfile.mkdtemp(prefix="foundry-fsdp-")

    from foundry.runtime.env import configure_environment

    configure_environment()

    import torch
    import torch.distributed as dist
    from lightning.pytorch import Callback

    from foundry.checkpointing.manifest import latest_valid
    from foundry.checkpointing.resume import resume_point
    from foundry.config import load_config
    from foundry.runtime.arithmetic import resolve_precision
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train, weights_digest
    from models.gpt import GPT, load_gpt

    if not args.cpu and not torch.cuda.is_available():
        print("gpu_fsdp_smoke: no CUDA device on this machine; nothing run (--cpu checks the script)")
        return 1
    every = max(1, args.steps // 4)
    # FSDP shards the matrices Muon needs whole (the config refuses the pair): AdamW for both modes.
    # precision auto: bf16-mixed on the GPU, as this script measured before tiny.yaml set 32-true for the CPU tests.
    on_gpu = ["train.optimizer=adamw", "train.precision=auto"]
    on_gpu += [] if args.cpu else ["train.accelerator=gpu", "train.strategy=fsdp"]
    steps = [f"train.max_steps={args.steps}", f"checkpoint.every_n_steps={every}", "train.deterministic=true"]
    config = load_config(REPO / "configs" / "tiny.yaml", [*on_gpu, *steps])
    device = "CPU (script check)" if args.cpu else torch.cuda.get_device_name()
    print(f"{device}; torch {torch.__version__}; precision {resolve_precision(config.train)}")

    class Probe(Callback):
        """What the run actually used, read while it trains (the process group may be gone after)."""

        def on_train_start(self, trainer, module) -> None:
            self.strategy = type(trainer.strategy).__name__
            self.backend = dist.get_backend() if dist.is_initialized() else "none"

    probe = Probe()

    def run(folder: Path) -> Path:  # as foundry.training.launch runs one process
        return train(
            config, TrainingRun(args.data_dir, folder, None, "gpu-smoke", resume_point(folder)), False, (probe,)
        )

    work = Path(tempfile.mkdtemp(prefix="fsdp-smoke-"))
    first = work / "uninterrupted"
    start = time.perf_counter()
    model_pt = run(first)
    seconds = time.perf_counter() - start
    backend = probe.backend
    tokens = args.steps * config.train.batch_size * config.model.block_size
    print(
        f"trained {args.steps} steps in {seconds:.1f} s (start-up included, {tokens / seconds:,.0f} tokens/s); "
        f"strategy {probe.strategy}, process group backend {backend}"
    )

    trained = load_gpt(model_pt)
    torch.manual_seed(0)
    untrained = GPT(trained.config)
    before = holdout_loss(untrained, args.data_dir, config.model.block_size)
    after = holdout_loss(trained, args.data_dir, config.model.block_size)
    print(f"holdout loss on the CPU: untrained {before:.3f}, trained {after:.3f}")

    resumed = shutil.copytree(first, work / "resumed")
    newest = resumed / f"step-{args.steps:06d}.ckpt"
    with open(newest, "r+b") as f:  # a write cut short
        f.truncate(newest.stat().st_size // 2)
    (resumed / "model.pt").unlink()
    fallback = latest_valid(resumed).step
    again = run(resumed)
    digest = weights_digest(torch.load(model_pt, weights_only=True)["state_dict"])
    exact = weights_digest(torch.load(again, weights_only=True)["state_dict"]) == digest
    print(f"resumed from step {fallback} to {args.steps}: weights {'equal' if exact else 'differ'} bit for bit")
    ok = (args.cpu or (backend == "nccl" and probe.strategy == "FSDPStrategy")) and after < before
    print(
        f"gpu_fsdp_smoke: {'ok' if ok else 'FAILED'}, {probe.strategy}/{backend}/{resolve_precision(config.train)}, "
        f"holdout loss {before:.3f} -> {after:.3f}, resume from step {fallback} bitwise {'exact' if exact else 'not exact'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
