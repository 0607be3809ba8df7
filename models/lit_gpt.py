"""The LightningModule: wires loss, schedule and metrics around `GPT`; nothing else."""

from __future__ import annotations

import math
import time

import lightning as L
import torch

from models.gpt import GPT, GPTConfig
from models.lora import LoRASpec, adapter_state_dict, add_lora, merge_lora, trainable_share
from models.optim import MuonAdamW, muon_groups


def warmup_cosine(step: int, warmup: int, total: int, floor: float) -> float:
    """Multiplier of the peak learning rate: linear warmup, then cosine down to `floor`."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def adamw(model: GPT, learning_rate: float, weight_decay: float, precision: str) -> torch.optim.AdamW:
    """The optimizer training uses. Fused: one kernel for all parameters; on 2 CPU cores the per-tensor
    loop cost ~10% of a step. Not under 16-mixed, where Lightning must unscale gradients before clipping."""
    return torch.optim.AdamW(
        model.optimizer_groups(weight_decay), lr=learning_rate, betas=(0.9, 0.95), fused=precision != "16-mixed"
    )


def muon_adamw(model: GPT, learning_rate: float, muon_learning_rate: float, weight_decay: float) -> MuonAdamW:
    return MuonAdamW(muon_groups(model, weight_decay, muon_learning_rate), lr=learning_rate, betas=(0.9, 0.95))


def clip_gradients(module: L.LightningModule, optimizer, gradient_clip_val, gradient_clip_algorithm) -> None:
    """Lightning's own clipping refuses a model FSDP shards: only the wrapper sees the whole gradient's norm."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    if gradient_clip_val and isinstance(module.trainer.model, FullyShardedDataParallel):
        module.trainer.model.clip_grad_norm_(gradient_clip_val)
    elif gradient_clip_val and module.trainer.precision == "bf16-mixed":
        # bf16 scales no loss, so the fused optimizer has nothing to unscale, but Lightning refuses to clip
        # for it all the same; its plain clipping by norm is what the other precisions get.
        module.trainer.precision_plugin.clip_grad_by_norm(optimizer, gradient_clip_val)
    else:
        module.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)


def scheduled(optimizer: torch.optim.Optimizer, hp) -> dict:
    """The optimizer with its warmup-cosine schedule, stepped per optimizer step (what Lightning's hook returns)."""
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, hp.warmup_steps, hp.max_steps, hp.min_lr_ratio)
    )
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class _Window:
    """What happened since the last log: loss, tokens and time, split into compute and data wait.

    The loss stays a tensor on the device, so no step waits for the accelerator except a logged one.
    """

    def __init__(self):
        self.start: float | None = None
        self.loss_sum, self.micro_batches, self.tokens, self.steps = 0.0, 0, 0, 0
        self.data_wait = self.excluded = 0.0

    def elapsed(self, now: float) -> float:
        return max(now - (self.start or now) - self.excluded, 1e-9)


class LitGPT(L.LightningModule):
    # No defaults: the values come from the one config (`foundry.config.TrainConfig`), never from here.
    def __init__(
        self,
        model_args: dict,
        *,
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
        self.model = GPT(GPTConfig(**model_args))
        self._window = _Window()
        self._last_batch_end: float | None = None
        self._last_step = 0
        self._validation_start = 0.0

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
        w = self._window
        w.loss_sum, w.micro_batches, w.tokens = w.loss_sum + loss.detach(), w.micro_batches + 1, w.tokens + x.numel()
        return loss

    def on_train_start(self) -> None:
        self._last_step = self.trainer.global_step  # a resumed run counts on from its checkpoint

    def on_train_batch_start(self, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self._window.start is None:
            self._window.start = now
        if self._last_batch_end is not None:
            # Between two batches the loop only fetches data (and saves checkpoints).
            self._window.data_wait += now - self._last_batch_end

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self._last_batch_end = time.perf_counter()
        if self.trainer.global_step == self._last_step:
            return  # a micro-batch of gradient accumulation: no optimizer step yet
        self._last_step = self.trainer.global_step
        self._window.steps += 1
        if self._last_step % self.hparams.log_every_n_steps == 0:
            self._log_window(self._last_batch_end)

    def _log_window(self, now: float) -> None:
        w, world = self._window, self.trainer.world_size
        seconds = w.elapsed(now)
        metrics = {
            "train/lr": self.optimizers().param_groups[0]["lr"],
            "train/tokens_per_sec": w.tokens * world / seconds,  # every rank runs the same batch shape
            "train/step_time_ms": 1000 * seconds / w.steps,
            "train/data_wait_ms": 1000 * w.data_wait / w.steps,
        }
        if self.hparams.peak_flops:
            metrics["train/mfu"] = self.model.flops_per_token() * w.tokens / seconds / self.hparams.peak_flops
        self.log_dict(metrics)
        # Averaged over the window and over every rank: one all-reduce per log, none per step.
        self.log("train/loss", w.loss_sum / w.micro_batches, prog_bar=True, sync_dist=True)
        self._window = _Window()
        self._window.start = now

    def on_validation_start(self) -> None:
        self._validation_start = time.perf_counter()

    def on_validation_end(self) -> None:
        # Validation time is not training throughput.
        now = time.perf_counter()
        self._window.excluded += now - self._validation_start
        self._last_batch_end = now

    def validation_step(self, batch, batch_idx):
        x, y = batch
        _, loss = self.model(x, y)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self):
        hp = self.hparams
        if hp.optimizer == "muon":
            optimizer = muon_adamw(self.model, hp.learning_rate, hp.muon_learning_rate, hp.weight_decay)
        else:
            optimizer = adamw(self.model, hp.learning_rate, hp.weight_decay, self.trainer.precision)
        return scheduled(optimizer, hp)
