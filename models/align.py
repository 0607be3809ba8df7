"""Alignment losses: supervised fine-tuning on assistant tokens only, and DPO (Rafailov et al., 2023).

Targets use -100 for every position that does not count (prompt, system and user tokens, padding),
as `GPT.forward` and `F.cross_entropy` do.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE = -100


def masked_targets(targets: torch.Tensor, trained: torch.Tensor) -> torch.Tensor:
    """`targets` with IGNORE wherever `trained` is 0."""
    return torch.where(trained.bool(), targets, torch.full_like(targets, IGNORE))


def token_logps(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B, T) log-probability of each target token; 0 where the target is IGNORE."""
    B, T, V = logits.shape
    nll = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=IGNORE, reduction="none")
    return -nll.view(B, T)


def sequence_logps(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(B,) summed log-probability of each row's counted targets: a response's log-likelihood."""
    return token_logps(logits, targets).sum(dim=1)


@dataclass
class DPOOutput:
    loss: torch.Tensor  # mean over pairs
    chosen_rewards: torch.Tensor  # (B,) beta * (policy - reference) log-ratio of the chosen response
    rejected_rewards: torch.Tensor

    @property
    def margin(self) -> torch.Tensor:
        return (self.chosen_rewards - self.rejected_rewards).mean()

    @property
    def accuracy(self) -> torch.Tensor:
        """Share of pairs whose chosen reward beats the rejected one (ties count as failures)."""
        return (self.chosen_rewards > self.rejected_rewards).float().mean()


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    reference_chosen: torch.Tensor,
    reference_rejected: torch.Tensor,
    beta: float,
) -> DPOOutput:
    """-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))) on summed log-probabilities, averaged over pairs."""
    chosen = beta * (policy_chosen - reference_chosen)
    rejected = beta * (policy_rejected - reference_rejected)
    loss = -F.logsigmoid(chosen - rejected).mean()
    return DPOOutput(loss, chosen.detach(), rejected.detach())


def token_kl(policy_logits: torch.Tensor, reference_logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean KL(policy || reference) of the next-token distributions at the counted positions: how far the
    policy has moved from the reference on the data's own contexts (a proxy: not on the policy's samples)."""
    counted = targets != IGNORE
    policy = F.log_softmax(policy_logits[counted].float(), dim=-1)
    reference = F.log_softmax(reference_logits[counted].float(), dim=-1)
    return (policy.exp() * (policy - reference)).sum(dim=-1).mean()
