"""Muon for a transformer's hidden matrices and AdamW for everything else, as one optimizer.

Muon (Jordan et al., 2024) replaces each matrix's momentum update by its nearest semi-orthogonal matrix, found
with a Newton-Schulz iteration. One optimizer object rather than two keeps Lightning's automatic optimization,
one learning-rate schedule (it scales every group's `lr`) and one state in the checkpoint.

`torch.optim.Muon` computes the iteration in bfloat16, which on a CPU costs about as much as the rest of the
training step (`python bench/muon_step.py`: 370 ms against 27 ms in float32 for the default model's eight matrices
on 2 cores); here it runs in float32 on a CPU and in bfloat16 on accelerators.
"""

from __future__ import annotations

import math

import torch

# Keller Jordan's quintic coefficients, as `torch.optim.Muon` uses them.
NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)


def orthogonalize(matrix: torch.Tensor, steps: int = 5, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An approximately semi-orthogonal matrix with `matrix`'s singular vectors (singular values near 1)."""
    a, b, c = NS_COEFFICIENTS
    x = matrix.to(dtype or (torch.float32 if matrix.device.type == "cpu" else torch.bfloat16))
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=1e-7)  # spectral norm at most 1
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return (x.T if tall else x).to(matrix.dtype)


class MuonAdamW(torch.optim.Optimizer):
    """Groups with `muon: True` (2-D parameters only) take Muon steps with Nesterov momentum, their learning
    rate scaled by sqrt(max(1, rows / columns)) as in `torch.optim.Muon`'s "original"; the other groups take
    AdamW steps. Weight decay is decoupled in both."""

    def __init__(self, groups: list[dict], *, lr: float, betas=(0.9, 0.95), eps: float = 1e-8, momentum: float = 0.95):
        defaults = dict(lr=lr, betas=betas, eps=eps, momentum=momentum, weight_decay=0.0, muon=False)
        super().__init__(groups, defaults)
        for group in self.param_groups:
            if group["muon"] and any(p.dim() != 2 for p in group["params"]):
                raise ValueError("Muon groups take 2-D parameters only")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    (self._muon if group["muon"] else self._adamw)(p, group)
        return loss

    def _muon(self, p: torch.Tensor, group: dict) -> None:
        state = self.state[p]
        if not state:
            state["momentum_buffer"] = torch.zeros_like(p)
        buffer, momentum = state["momentum_buffer"], group["momentum"]
        buffer.lerp_(p.grad, 1 - momentum)
        update = orthogonalize(p.grad.lerp(buffer, momentum))
        lr = group["lr"]
        p.mul_(1 - lr * group["weight_decay"])
        p.add_(update, alpha=-lr * math.sqrt(max(1.0, p.size(0) / p.size(1))))

    def _adamw(self, p: torch.Tensor, group: dict) -> None:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
        (beta1, beta2), lr = group["betas"], group["lr"]
        state["step"] += 1
        step = state["step"].item()
        state["exp_avg"].lerp_(p.grad, 1 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
        denominator = state["exp_avg_sq"].sqrt().div_(math.sqrt(1 - beta2**step)).add_(group["eps"])
        p.mul_(1 - lr * group["weight_decay"])
        p.addcdiv_(state["exp_avg"], denominator, value=-lr / (1 - beta1**step))


def muon_groups(model: torch.nn.Module, weight_decay: float, muon_lr: float, blocks: str = "blocks.") -> list[dict]:
    """The trainable matrices under `blocks` (a prefix of names) for Muon at `muon_lr`, when there are any; every
    other parameter (the embeddings, tied to the output head) for AdamW at the optimizer's `lr`, in the model's
    `optimizer_groups` (decayed or not). Muon's matrices are chosen by shape: FSDP, which flattens them, is refused
    with Muon (`foundry.config.TrainConfig`)."""
    hidden = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() == 2 and n.startswith(blocks)]
    chosen = {id(p) for p in hidden}
    groups = [  # AdamW's first: Lightning's and our `train/lr` read the first group
        {**g, "params": [p for p in g["params"] if id(p) not in chosen]} for g in model.optimizer_groups(weight_decay)
    ]
    if hidden:
        groups.append({"params": hidden, "muon": True, "lr": muon_lr, "weight_decay": weight_decay})
    return groups


def muon_adamw(
    model: torch.nn.Module,
    learning_rate: float,
    muon_learning_rate: float,
    weight_decay: float,
    blocks: str = "blocks.",
) -> MuonAdamW:
    """The optimizer training builds with Muon: Muon for the trainable matrices under `blocks` (a GPT's `blocks.`,
    a ViT's `net.blocks.`; a CNN has none, its kernels are 4-D), AdamW for everything else (`muon_groups`)."""
    return MuonAdamW(muon_groups(model, weight_decay, muon_learning_rate, blocks), lr=learning_rate, betas=(0.9, 0.95))
