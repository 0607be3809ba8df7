"""Which parameters weight decay applies to: decided by shape while the model is whole, matched by name later.

FSDP (with `use_orig_params`, as Lightning sets it) hands the optimizer every parameter as a 1-D view of its flat
shard and inserts `_fsdp_wrapped_module` into the names: a rule on `p.dim()` at that point decays nothing. So a
model records the names of its matrices (and kernels, embeddings) when it is built, and again whenever parameters
are added (adapters), and its optimizer groups look names up rather than shapes.
"""

from __future__ import annotations

import torch.nn as nn


def unwrapped(name: str) -> str:
    """A parameter's name without the parts wrappers insert (FSDP's `_fsdp_wrapped_module`, torch.compile's
    `_orig_mod`): our own modules' names never start with an underscore."""
    return ".".join(part for part in name.split(".") if not part.startswith("_"))


class DecayedByName:
    """Mixin for an `nn.Module`: `optimizer_groups` from the names `remember_matrices` recorded by shape.

    `never_decayed` names parameters with two or more dimensions that still must not decay (a ViT's positions)."""

    never_decayed: frozenset[str] = frozenset()
    _decayed: frozenset[str] = frozenset()

    def remember_matrices(self: nn.Module) -> None:
        """Record every parameter of two or more dimensions as decayed, tied aliases included. Call once the
        parameters exist and after adding any, always before FSDP flattens them; names already recorded stay."""
        shaped = {unwrapped(n) for n, p in self.named_parameters(remove_duplicate=False) if p.dim() >= 2}
        self._decayed = self._decayed | (shaped - self.never_decayed)

    def decays(self, name: str) -> bool:
        return unwrapped(name) in self._decayed

    def optimizer_groups(self: nn.Module, weight_decay: float) -> list[dict]:
        """The trainable parameters in `named_parameters` order: the recorded ones decayed, the rest not."""
        named = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        decay = [p for n, p in named if self.decays(n)]
        no_decay = [p for n, p in named if not self.decays(n)]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
