"""Stage C: the final weights as the mean of the last steps' (`train.average_last`), a uniform average of the
weights after each of those optimizer steps, as stochastic weight averaging takes it.

At the end of a short run at a still sizeable learning rate the weights move around a minimum more than they
approach it; their mean over the last steps sits nearer to it (bench/README.md, "Weights averaged over the last
steps"). The running mean is part of every checkpoint (a Lightning callback's state), so a resumed run averages
exactly what an uninterrupted one does. Validation and the checkpoints' own weights stay the optimizer's.
"""

from __future__ import annotations

import logging

import torch
from lightning.pytorch import Callback

from foundry.config import TrainConfig

log = logging.getLogger(__name__)


def averaged_steps(t: TrainConfig, module: torch.nn.Module) -> int:
    """How many final steps' weights the run averages: `train.averaged_steps` where the module takes it, else 0;
    one warning when `average_last` asks for it under FSDP, which keeps the last step's weights."""
    if t.average_last and t.strategy == "fsdp" and not t.init_from:
        log.warning(
            "train.average_last is %s but FSDP gives each rank a shard of the weights: the last step's weights are "
            "kept; set train.average_last=0 to say so",
            t.average_last,
        )
    # A model whose averaging was never measured (BatchNorm's statistics would not follow the mean) keeps its own.
    return t.averaged_steps if getattr(module, "averages_weights", False) else 0


class WeightAverage(Callback):
    """The running mean of `module.model`'s parameters after each of the last `steps` of `max_steps` optimizer
    steps; `apply` puts it in place once training ends."""

    def __init__(self, steps: int, max_steps: int):
        self.first = max_steps - steps + 1  # the first optimizer step (counted from 1) in the mean
        self.count = 0
        self.mean: dict[str, torch.Tensor] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step < self.first + self.count:
            return  # before the window, or a micro-batch of accumulation (no new optimizer step since the last)
        self.count += 1
        with torch.no_grad():
            for name, param in pl_module.model.named_parameters():
                value = param.detach().float()
                if self.count == 1:
                    self.mean[name] = value.clone()
                else:
                    self.mean[name].add_(value - self.mean[name], alpha=1 / self.count)

    def apply(self, module: torch.nn.Module) -> None:
        """Copy the mean into `module.model`'s parameters (each in its own dtype); a run stopped before the window
        has no mean and keeps its weights."""
        with torch.no_grad():
            for name, param in module.model.named_parameters():
                if name in self.mean:
                    param.copy_(self.mean[name].to(param.dtype))

    def state_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean}

    def load_state_dict(self, state_dict: dict) -> None:
        self.count, self.mean = state_dict["count"], state_dict["mean"]
