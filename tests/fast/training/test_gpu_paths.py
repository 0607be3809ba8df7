"""What the GPU runs go through, checked where CI runs (no GPU): clipping under bf16-mixed. The two GPU scripts'
own CPU modes: tests/slow/training/test_gpu_scripts.py."""

from __future__ import annotations

import pytest
import torch
from conftest import REPO_ROOT
from lightning.pytorch import Callback

from foundry.config import load_config
from foundry.training.run import TrainingRun
from foundry.training.trainer import train


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
    train(config, TrainingRun(tiny_dataset, tmp_path / "ckpt"), progress=False, callbacks=(norms,))
    assert len(norms.norms) == 4
    assert all(0 < n <= 0.01 * 1.001 for n in norms.norms), norms.norms
