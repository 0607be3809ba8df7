"""The LightningModules of alignment: `LitGPT` with another loss. Schedule, optimizer, logging windows and
checkpoints are pretraining's, so resume works the same way.

- `LitSFT`: next-token loss on assistant tokens only, over packed rows (x, y, segments).
- `LitDPO`: DPO against a frozen reference copy of the starting weights, plus `sft_weight` times the
  chosen replies' own loss, which keeps the policy generating them while it learns the preferences; with
  replay (batches (x, y, wx, wy)), plus the pretraining windows' next-token loss, each window weighing as
  much as one pair.
"""

from __future__ import annotations

import torch

from models.align import dpo_loss, sequence_logps, token_kl
from models.gpt import GPT, GPTConfig
from models.lit_gpt import LitGPT


class LitSFT(LitGPT):
    def training_step(self, batch, batch_idx):
        x, y, segments = batch
        loss = self.model.masked_loss(x, y, segments)
        self._count(loss, x.numel())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y, segments = batch
        loss = self.model.masked_loss(x, y, segments)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)


class LitDPO(LitGPT):
    # Values come from the config (`align.beta`, `align.sft_weight`), never from defaults here.
    def __init__(self, model_args: dict, *, beta: float, sft_weight: float, **train):
        super().__init__(model_args, **train)
        self.beta, self.sft_weight = beta, sft_weight
        # Held in a tuple, not as a submodule: the optimizer, checkpoints and `model.pt` see only the policy.
        self._reference = (GPT(GPTConfig(**model_args)).eval().requires_grad_(False),)
        self._sums: dict[str, torch.Tensor] = {}

    @property
    def reference(self) -> GPT:
        return self._reference[0]

    def set_reference(self, state_dict: dict) -> None:
        """The frozen model the policy is measured against: the starting weights, on resume too."""
        self.reference.load_state_dict(state_dict)

    def on_fit_start(self) -> None:
        self.reference.to(self.device)

    def _pair_loss(self, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x, y = batch
        half = x.size(0) // 2
        logits, _ = self.model(x)
        logps = sequence_logps(logits, y)
        with torch.no_grad():
            reference_logits, _ = self.reference(x)
            reference_logps = sequence_logps(reference_logits, y)
            kl = token_kl(logits.detach(), reference_logits, y)
        out = dpo_loss(logps[:half], logps[half:], reference_logps[:half], reference_logps[half:], self.beta)
        chosen_tokens = (y[:half] != -100).sum().clamp(min=1)
        chosen_nll = -logps[:half].sum() / chosen_tokens
        stats = {"margin": out.margin, "accuracy": out.accuracy, "kl": kl, "chosen_nll": chosen_nll.detach()}
        return out.loss + self.sft_weight * chosen_nll, stats

    def step_loss(self, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training loss of a batch of pairs (x, y), or of pairs and replayed windows (x, y, wx, wy):
        `loss + (windows / pairs) * replay`, `replay` the windows' pretraining loss (the mean next-token loss; with
        `model.mtp_depth`, plus the predictions ahead through their frozen matrices). As a sum over the
        batch's units divided by its pairs, every window counts as much as one pair, so `align.replay_fraction`
        is the share of the batch's units, and of their weight in the loss, that replay pretraining text."""
        loss, stats = self._pair_loss(batch[:2])
        if len(batch) == 2:
            return loss, stats
        wx, wy = batch[2:]
        _, replay = self.model(wx, wy)
        stats["replay_nll"] = replay.detach()
        return loss + (wx.size(0) / (batch[0].size(0) // 2)) * replay, stats

    def training_step(self, batch, batch_idx):
        loss, stats = self.step_loss(batch)
        for key, value in stats.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
        self._count(loss, sum(t.numel() for t in batch[::2]))  # the pairs' rows and the windows'
        return loss

    def _log_window(self, now: float) -> None:
        n = self._window.micro_batches
        self.log_dict({f"train/dpo_{k}": v / n for k, v in self._sums.items()}, sync_dist=True)
        self._sums = {}
        super()._log_window(now)

    def validation_step(self, batch, batch_idx):
        loss, stats = self._pair_loss(batch)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)
        self.log_dict({f"val/dpo_{k}": v for k, v in stats.items()}, sync_dist=True)
