"""Low-rank adapters on a model's linear projections, and merging them back into its weights.

LoRA: Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models" (ICLR 2022). A frozen
`W` (out, in) gains `scale * B @ A` with A (rank, in) and B (out, rank), scale = alpha / rank; B starts
at zero, so the adapted model starts as the base model. Pure PyTorch (PEFT is not a dependency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.decay import DecayedByName

# The GPT's projections, named by their path inside a block.
GPT_PROJECTIONS = ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")
_ADAPTER_WEIGHTS = ("lora_a", "lora_b")


@dataclass(frozen=True)
class LoRASpec:
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = GPT_PROJECTIONS

    def __post_init__(self):
        if self.rank < 1:
            raise ValueError(f"LoRA rank must be at least 1, got {self.rank}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not self.targets:
            raise ValueError("LoRA needs at least one target module")


class LoRALinear(nn.Module):
    """A frozen `nn.Linear` plus a trainable low-rank update of its weight."""

    def __init__(self, base: nn.Linear, spec: LoRASpec):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.scale = spec.alpha / spec.rank
        self.lora_a = nn.Parameter(torch.empty(spec.rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, spec.rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as nn.Linear initialises its own weight
        self.dropout = nn.Dropout(spec.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(self.dropout(x), self.lora_a), self.lora_b)
        return self.base(x) + self.scale * update

    def delta_weight(self) -> torch.Tensor:
        """The update in the base weight's shape (out, in)."""
        return self.scale * (self.lora_b @ self.lora_a)

    def merged(self) -> nn.Linear:
        """The base linear with the update added to its weight, trainable again; the adapter is left as it was."""
        with torch.no_grad():
            self.base.weight += self.delta_weight().to(self.base.weight.dtype)
        return self.base.requires_grad_(True)


def _targeted(model: nn.Module, targets: tuple[str, ...]) -> list[str]:
    """Names of the linear modules whose path ends in one of `targets`; a target that matches none is a typo."""
    names = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    chosen = [name for name in names if any(name == t or name.endswith(f".{t}") for t in targets)]
    for target in targets:
        if not any(name == target or name.endswith(f".{target}") for name in chosen):
            suffixes = sorted({".".join(n.split(".")[-2:]) for n in names})
            raise ValueError(f"LoRA target {target!r} matches no linear module; the model's are {suffixes}")
    return chosen


def _swap(model: nn.Module, name: str, replacement: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, replacement)


def add_lora(model: nn.Module, spec: LoRASpec) -> list[str]:
    """Freeze every weight of `model` and wrap the targeted projections in adapters (in place).

    Returns the wrapped modules' names. Only the adapters' A and B then receive gradients.
    """
    model.requires_grad_(False)
    wrapped = _targeted(model, spec.targets)
    for name in wrapped:
        base = model.get_submodule(name)
        _swap(model, name, LoRALinear(base, spec).train(base.training))  # an eval model stays in eval
    if isinstance(model, DecayedByName):  # the adapters' matrices decay, under FSDP too
        model.remember_matrices()
    return wrapped


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight (in place): the model's modules and state-dict keys become
    the base architecture's again, so serving loads it unchanged."""
    adapted = [name for name, module in model.named_modules() if isinstance(module, LoRALinear)]
    for name in adapted:
        _swap(model, name, model.get_submodule(name).merged())
    model.requires_grad_(True)
    return model


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters alone (A and B of each wrapped module), for logging beside the merged model."""
    return {
        name: p.detach().clone() for name, p in model.named_parameters() if name.rsplit(".", 1)[-1] in _ADAPTER_WEIGHTS
    }


def trainable_share(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts; tied weights count once."""
    params = list(model.parameters())  # deduplicated: the tied embedding appears once
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)
