"""The comparisons several gates make, written once."""

from __future__ import annotations

from foundry.gates.decision import Check
from foundry.gates.inputs import OldHoldout


def beats(candidate: float | None, reference: float | None, min_improvement: float = 0.0) -> Check:
    """Lower is better: the candidate beats the reference, by at least `min_improvement` (and strictly)."""
    passed = (
        candidate is not None
        and reference is not None
        and candidate <= reference - min_improvement
        and candidate < reference
    )
    return Check(passed=passed, candidate=candidate, reference=reference, allowance=min_improvement)


def no_forgetting(old: OldHoldout | None) -> Check:
    """The forgetting guard: on the reference model's own holdout the candidate may be worse by at most
    `max_regression` bits per byte. Not scored there: not passed."""
    if old is None:
        return Check(passed=False)
    return Check(
        passed=not old.forgets,
        candidate=old.challenger_bits_per_byte,
        reference=old.champion_bits_per_byte,
        allowance=old.max_regression,
    )


def forgot(old: OldHoldout, whose: str, where: str, then: str) -> str:
    """Why a candidate that won on its own holdout is refused for what it forgot on `where`."""
    return (
        f"forgets: {old.challenger_bits_per_byte:.4f} against {whose} {old.champion_bits_per_byte:.4f} "
        f"bits/byte on {where}, worse by {old.regression:.4f}, more than the {old.max_regression} allowed; {then}"
    )
