"""What the GPU runs go through, checked where CI runs (no GPU): clipping under bf16-mixed, and the two GPU
scripts' own CPU modes, so that they still run when a GPU is next lent (bench/README.md has their figures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback

from foundry.config import load_config
from foundry.training.trainer import train

REPO_ROOT = Path(__file__).resolve().parent.parent


class GradNorms(Callback):
    """The gradient norm each optimizer step sees, after clipping (read once the step is taken: Lightning runs the closure inside `step`)."""

    def __init__(self):
        self.norms: list[float] = []

    def on_train_start(self, trainer, module) -> None:
        def record(optimizer, *_):
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            self.norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())

        trainer.optimizers[0].register_step_post_hook(record)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_gradients_are_clipped_by_norm_with_the_fused_optimizer(precision, optimizer, tiny_dataset, tmp_path):
    """Lightning refuses to clip for a fused optimizer under any mixed precision; bf16 needs no unscaling,
    so training clips itself (the GPU's default precision failed here on its first run). Muon's optimizer is
    not fused, and is clipped the same way."""
    config = load_config(
        REPO_ROOT / "configs" / "tiny.yaml",
        ["train.max_steps=4", "checkpoint.every_n_steps=100", "train.grad_clip=0.01", f"train.precision={precision}"]
        + [f"train.optimizer={optimizer}"],
    )
    norms = GradNorms()
    train(config, tiny_dataset, tmp_path / "ckpt", progress=False, callbacks=(norms,))
    assert len(norms.norms) == 4
    assert all(0 < n <= 0.01 * 1.001 for n in norms.norms), norms.norms


def run_script(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # a benchmark script in a process of its own
def test_gpu_mfu_smoke_runs_both_loops_on_cpu():
    headline = run_script("bench/gpu_mfu.py", "--smoke", "--steps", "20", "--warmup", "5")
    assert headline.startswith("gpu_mfu: ") and "MFU ours" in headline and "code check only" in headline


@pytest.mark.slow  # trains, rebuilds and resumes in a process of its own
def test_fsdp_smoke_script_trains_rebuilds_and_resumes_on_cpu(tiny_dataset):
    headline = run_script("bench/gpu_fsdp_smoke.py", str(tiny_dataset), "--cpu", "--steps", "20")
    assert headline.startswith("gpu_fsdp_smoke: ok, SingleDeviceStrategy/none/32-true")
    assert "resume from step 15 bitwise exact" in headline
