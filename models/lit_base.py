"""The Lightning lifecycle every LightningModule here shares (`LitGPT`, `LitVision`): the optimizer and its
warmup-cosine schedule, gradient clipping that also works under FSDP, and logging windows of throughput and loss
that keep validation time out of the training throughput. A subclass brings its model (`self.model`), its steps,
what its throughput counts (`throughput_unit`) and the FLOPs of one unit of it."""

from __future__ import annotations

import math
import time

import lightning as L
import torch

from models.optim import muon_adamw


def warmup_cosine(step: int, warmup: int, total: int, floor: float) -> float:
    """Multiplier of the peak learning rate: linear warmup, then cosine down to `floor`."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def adamw(model: torch.nn.Module, learning_rate: float, weight_decay: float, precision: str) -> torch.optim.AdamW:
    """The optimizer training uses. Fused: one kernel for all parameters; on 2 CPU cores the per-tensor
    loop cost ~10% of a step. Not under 16-mixed, where Lightning must unscale gradients before clipping."""
    return torch.optim.AdamW(
        model.optimizer_groups(weight_decay), lr=learning_rate, betas=(0.9, 0.95), fused=precision != "16-mixed"
    )


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
    """What happened since the last log: loss, units (tokens, images) and time, split into compute and data wait.

    The loss stays a tensor on the device, so no step waits for the accelerator except a logged one.
    """

    def __init__(self):
        self.start: float | None = None
        self.loss_sum, self.micro_batches, self.tokens, self.steps = 0.0, 0, 0, 0
        self.data_wait = self.excluded = 0.0

    def elapsed(self, now: float) -> float:
        return max(now - (self.start or now) - self.excluded, 1e-9)


# The training settings every module takes as keywords, with no defaults: the values come from the one config
# (`foundry.config.TrainConfig`), never from here. They are the modules' hyperparameters, as `self.hparams`.
SETTINGS = (
    *("learning_rate", "optimizer", "muon_learning_rate", "weight_decay"),
    *("warmup_steps", "max_steps", "min_lr_ratio", "log_every_n_steps", "peak_flops"),
)


class LitBase(L.LightningModule):
    """The shared lifecycle. A subclass takes the `SETTINGS` as keywords (`**settings`, handed here to be checked),
    calls `save_hyperparameters()` in its own `__init__`, sets `self.model` (with `optimizer_groups(weight_decay)`),
    counts each micro-batch with `_count` and says what Muon trains (`muon_blocks`) and what one unit costs
    (`_flops_per_unit`)."""

    throughput_unit = "tokens"  # what the progress line counts a second: `train/<unit>_per_sec`
    muon_blocks = "blocks."  # the names of the matrices Muon trains start so (`models.optim.muon_groups`)

    def __init__(self, settings: dict):
        super().__init__()
        given = set(settings)
        if missing := [name for name in SETTINGS if name not in given]:
            raise TypeError(f"{type(self).__name__} needs the training settings {missing}: they have no defaults")
        if unknown := sorted(given - set(SETTINGS)):
            raise TypeError(f"{type(self).__name__} takes no settings {unknown}; it takes {', '.join(SETTINGS)}")
        self._window = _Window()
        self.units_trained = 0  # this process's micro-batches' units since it started: the energy's denominator
        self._last_batch_end: float | None = None
        self._last_step = 0
        self._validation_start = 0.0

    # --- what a subclass brings ---

    def _flops_per_unit(self) -> float:
        raise NotImplementedError

    def _stepped(self) -> None:
        """Called after each optimizer step, before its logging: what a subclass resets per step."""

    def _log_more(self, window: _Window) -> None:
        """Called when a window is logged, before it is replaced: a subclass's own metrics of the window."""

    # --- the lifecycle ---

    def _count(self, loss: torch.Tensor, units: int) -> None:
        """One micro-batch's loss and size into the window."""
        w = self._window
        w.loss_sum, w.micro_batches, w.tokens = w.loss_sum + loss.detach(), w.micro_batches + 1, w.tokens + units
        self.units_trained += int(units)

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
        self._stepped()
        self._window.steps += 1
        if self._last_step % self.hparams.log_every_n_steps == 0:
            self._log_window(self._last_batch_end)

    def _log_window(self, now: float) -> None:
        w, world = self._window, self.trainer.world_size
        seconds = w.elapsed(now)
        metrics = {
            "train/lr": self.optimizers().param_groups[0]["lr"],
            f"train/{self.throughput_unit}_per_sec": w.tokens * world / seconds,  # every rank runs the same shape
            "train/step_time_ms": 1000 * seconds / w.steps,
            "train/data_wait_ms": 1000 * w.data_wait / w.steps,
        }
        if self.hparams.peak_flops:
            metrics["train/mfu"] = self._flops_per_unit() * w.tokens / seconds / self.hparams.peak_flops
        self.log_dict(metrics)
        # Averaged over the window and over every rank: one all-reduce per metric and log, none per step.
        self.log("train/loss", w.loss_sum / w.micro_batches, prog_bar=True, sync_dist=True)
        self._log_more(w)
        self._window = _Window()
        self._window.start = now

    def on_validation_start(self) -> None:
        self._validation_start = time.perf_counter()

    def on_validation_end(self) -> None:
        # Validation time is not training throughput.
        now = time.perf_counter()
        self._window.excluded += now - self._validation_start
        self._last_batch_end = now

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self):
        hp = self.hparams
        if hp.optimizer == "muon":
            optimizer = muon_adamw(
                self.model, hp.learning_rate, hp.muon_learning_rate, hp.weight_decay, self.muon_blocks
            )
        else:
            optimizer = adamw(self.model, hp.learning_rate, hp.weight_decay, self.trainer.precision)
        return scheduled(optimizer, hp)
