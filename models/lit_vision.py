"""The LightningModule of image classification: wires cross-entropy, accuracy and augmentation around
`models.vision.ImageClassifier`; the schedule, optimizer and throughput are the shared lifecycle's
(`models.lit_base`). Metric names follow `LitGPT`'s (`train/loss`, `train/lr`, `train/step_time_ms`,
`train/data_wait_ms`, `train/mfu`, `val/loss`), with `train/images_per_sec` for tokens and `train/accuracy`,
`val/accuracy` beside the losses."""

from __future__ import annotations

import numpy as np
import torch

from models.lit_base import LitBase
from models.vision import AugmentConfig, ImageClassifier, VisionConfig, augment


class LitVision(LitBase):
    throughput_unit = "images"  # what the progress line counts a second
    muon_blocks = "net.blocks."  # Muon for the ViT blocks' matrices (a CNN has none: its kernels are 4-D)

    # No defaults: the values come from the one config, never from here (as `LitGPT`'s).
    def __init__(self, model_args: dict, *, augment: dict, seed: int, channels_last: bool, **settings):
        """`settings`: `models.lit_base.SETTINGS`, all of them, from the one config."""
        super().__init__(settings)
        self.save_hyperparameters()
        self.model = ImageClassifier(VisionConfig(**model_args))
        self.augment = AugmentConfig(**augment)
        if channels_last:
            self.model.to(memory_format=torch.channels_last)  # `.to(device)` later keeps the format
        self._correct = 0
        self._micro = 0  # micro-batches since the last optimizer step: 0 at every checkpoint

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
        self._count(loss, len(targets))  # `tokens` counts images here
        self._correct = self._correct + (logits.detach().argmax(-1) == targets).sum()
        return loss

    def _stepped(self) -> None:
        self._micro = 0

    def _log_more(self, window) -> None:
        self.log("train/accuracy", torch.as_tensor(self._correct, dtype=torch.float32) / window.tokens, sync_dist=True)
        self._correct = 0

    def validation_step(self, batch, batch_idx):
        images, targets = batch
        logits, loss = self.model(self._images(images), targets)
        accuracy = (logits.argmax(-1) == targets).float().mean()
        self.log("val/loss", loss, prog_bar=True, sync_dist=True, batch_size=len(targets))
        self.log("val/accuracy", accuracy, sync_dist=True, batch_size=len(targets))

    def _flops_per_unit(self) -> float:
        return self.model.flops_per_image()
