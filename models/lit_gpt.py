"""The LightningModule of pretraining: wires the next-token loss around `GPT`; the schedule, optimizer and
metrics are the shared lifecycle's (`models.lit_base`)."""

from __future__ import annotations

import torch

from models.gpt import GPT, GPTConfig
from models.lit_base import LitBase
from models.lora import LoRASpec, adapter_state_dict, add_lora, merge_lora, trainable_share


class LitGPT(LitBase):
    averages_weights = True  # the trainer may keep the mean of the last steps' weights (`train.average_last`)

    def __init__(self, model_args: dict, **settings):
        """`settings`: `models.lit_base.SETTINGS`, all of them, from the one config."""
        super().__init__(settings)
        self.save_hyperparameters()
        self.model = GPT(GPTConfig(**model_args))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model(idx)[0]

    def add_adapters(self, spec: LoRASpec) -> tuple[int, int]:
        """Freeze the model and train LoRA adapters instead (before fitting, so a resume restores them);
        returns (trainable, total) parameters."""
        add_lora(self.model, spec)
        return trainable_share(self.model)

    def merge_adapters(self) -> dict[str, torch.Tensor]:
        """Fold the adapters into the weights (the model is the base architecture again); returns them."""
        adapters = adapter_state_dict(self.model)
        merge_lora(self.model)
        return adapters

    def training_step(self, batch, batch_idx):
        x, y = batch
        _, loss = self.model(x, y)
        self._count(loss, x.numel())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        _, loss = self.model(x, y)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)

    def _flops_per_unit(self) -> float:
        return self.model.flops_per_token()
