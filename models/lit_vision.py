"""The LightningModule of image classification: wires cross-entropy, accuracy, augmentation, the schedule and
throughput around `models.vision.ImageClassifier`; nothing else. Metric names follow `LitGPT`'s (`train/loss`,
`train/lr`, `train/step_time_ms`, `train/data_wait_ms`, `train/mfu`, `val/loss`), with `train/images_per_sec`
for tokens and `train/accuracy`, `val/accuracy` beside the losses."""

from __future__ import annotations

import time

import lightning as L
import numpy as np
import torch

from models.lit_gpt import _Window, adamw, clip_gradients, scheduled
from models.optim import MuonAdamW, muon_groups
from models.vision import AugmentConfig, ImageClassifier, VisionConfig, augment


def muon_adamw(model: ImageClassifier, learning_rate: float, muon_learning_rate: float, weight_decay: float):
    """Muon for the ViT blocks' matrices (a CNN has none: its kernels are 4-D), AdamW for everything else."""
    groups = muon_groups(model, weight_decay, muon_learning_rate, blocks="net.blocks.")
    return MuonAdamW(groups, lr=learning_rate, betas=(0.9, 0.95))


class LitVision(L.LightningModule):
    throughput_unit = "images"  # what the progress line counts a second

    # No defaults: the values come from the one config, never from here (as `LitGPT`'s).
    def __init__(
        self,
        model_args: dict,
        *,
        augment: dict,
        seed: int,
        channels_last: bool,
        learning_rate: float,
        optimizer: str,
        muon_learning_rate: float,
        weight_decay: float,
        warmup_steps: int,
        max_steps: int,
        min_lr_ratio: float,
        log_every_n_steps: int,
        peak_flops: float,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.model = ImageClassifier(VisionConfig(**model_args))
        self.augment = AugmentConfig(**augment)
        if channels_last:
            self.model.to(memory_format=torch.channels_last)  # `.to(device)` later keeps the format
        self._window = _Window()
        self._correct = 0
        self._micro = 0  # micro-batches since the last optimizer step: 0 at every checkpoint
        self._last_batch_end: float | None = None
        self._last_step = 0
        self._validation_start = 0.0

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)[0]

    def _images(self, images: torch.Tensor) -> torch.Tensor:
        return images.contiguous(memory_format=torch.channels_last) if self.hparams.channels_last else images

    def _generator(self) -> torch.Generator:
        """Seeded from the run's seed, the rank, the step and the micro-batch: a resumed run draws the same shifts."""
        key = [self.hparams.seed, self.global_rank, self.trainer.global_step, self._micro]
        return torch.Generator().manual_seed(int(np.random.SeedSequence(key).generate_state(1, np.uint64)[0]) >> 1)

    def training_step(self, batch, batch_idx):
        images, targets = batch
        images = augment(self._images(images), self.augment, self._generator())
        self._micro += 1
        logits, loss = self.model(images, targets)
        w = self._window
        w.loss_sum, w.micro_batches, w.tokens = w.loss_sum + loss.detach(), w.micro_batches + 1, w.tokens + len(targets)
        self._correct = self._correct + (logits.detach().argmax(-1) == targets).sum()
        return loss

    def on_train_start(self) -> None:
        self._last_step = self.trainer.global_step  # a resumed run counts on from its checkpoint

    def on_train_batch_start(self, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self._window.start is None:
            self._window.start = now
        if self._last_batch_end is not None:
            self._window.data_wait += now - self._last_batch_end  # between batches the loop only fetches data

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self._last_batch_end = time.perf_counter()
        if self.trainer.global_step == self._last_step:
            return  # a micro-batch of gradient accumulation: no optimizer step yet
        self._last_step, self._micro = self.trainer.global_step, 0
        self._window.steps += 1
        if self._last_step % self.hparams.log_every_n_steps == 0:
            self._log_window(self._last_batch_end)

    def _log_window(self, now: float) -> None:
        w, world = self._window, self.trainer.world_size
        seconds = w.elapsed(now)
        metrics = {
            "train/lr": self.optimizers().param_groups[0]["lr"],
            "train/images_per_sec": w.tokens * world / seconds,  # `tokens` counts images here
            "train/step_time_ms": 1000 * seconds / w.steps,
            "train/data_wait_ms": 1000 * w.data_wait / w.steps,
        }
        if self.hparams.peak_flops:
            metrics["train/mfu"] = self.model.flops_per_image() * w.tokens / seconds / self.hparams.peak_flops
        self.log_dict(metrics)
        # Averaged over the window and every rank: one all-reduce per metric and log, none per step.
        self.log("train/loss", w.loss_sum / w.micro_batches, prog_bar=True, sync_dist=True)
        self.log("train/accuracy", torch.as_tensor(self._correct, dtype=torch.float32) / w.tokens, sync_dist=True)
        self._window, self._correct = _Window(), 0
        self._window.start = now

    def on_validation_start(self) -> None:
        self._validation_start = time.perf_counter()

    def on_validation_end(self) -> None:
        now = time.perf_counter()  # validation time is not training throughput
        self._window.excluded += now - self._validation_start
        self._last_batch_end = now

    def validation_step(self, batch, batch_idx):
        images, targets = batch
        logits, loss = self.model(self._images(images), targets)
        accuracy = (logits.argmax(-1) == targets).float().mean()
        self.log("val/loss", loss, prog_bar=True, sync_dist=True, batch_size=len(targets))
        self.log("val/accuracy", accuracy, sync_dist=True, batch_size=len(targets))

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm)  # as LitGPT's

    def configure_optimizers(self):
        hp = self.hparams
        if hp.optimizer == "muon":
            optimizer = muon_adamw(self.model, hp.learning_rate, hp.muon_learning_rate, hp.weight_decay)
        else:
            optimizer = adamw(self.model, hp.learning_rate, hp.weight_decay, self.trainer.precision)
        return scheduled(optimizer, hp)
