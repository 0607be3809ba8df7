"""The LightningModule: wires loss, schedule and metrics around `GPT`; nothing else."""

from __future__ import annotations

import math
import time

import lightning as L
import torch

from models.gpt import GPT, GPTConfig


def warmup_cosine(step: int, warmup: int, total: int, floor: float) -> float:
    """Multiplier of the peak learning rate: linear warmup, then cosine down to `floor`."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


class LitGPT(L.LightningModule):
    def __init__(
        self, model_args: dict, learning_rate: float = 3e-3, weight_decay: float = 0.1,
        warmup_steps: int = 100, max_steps: int = 1000, min_lr_ratio: float = 0.1,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.model = GPT(GPTConfig(**model_args))
        self._last_step_end: float | None = None

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)[0]

    def training_step(self, batch, batch_idx):
        x, y = batch
        _, loss = self.model(x, y)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"])
        now = time.perf_counter()
        if self._last_step_end is not None:
            # Wall time of a whole step, data and optimizer included, summed over all processes.
            tokens = x.numel() * self.trainer.world_size
            self.log("train/tokens_per_sec", tokens / max(now - self._last_step_end, 1e-9))
        self._last_step_end = now
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        _, loss = self.model(x, y)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)
        self._last_step_end = None  # validation time is not training throughput

    def configure_optimizers(self):
        hp = self.hparams
        optimizer = torch.optim.AdamW(
            self.model.optimizer_groups(hp.weight_decay), lr=hp.learning_rate, betas=(0.9, 0.95)
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, hp.warmup_steps, hp.max_steps, hp.min_lr_ratio)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
