"""The comparisons several gates make, written once."""

from __future__ import annotations

from foundry.gates.decision import Check
from foundry.gates.inputs import BITS_PER_BYTE, Measure, OldScores


def beats(
    candidate: float | None, reference: float | None, min_improvement: float = 0.0, measure: Measure = BITS_PER_BYTE
) -> Check:
    """The candidate beats the reference by at least `min_improvement` (and strictly): lower for bits per byte,
    higher for a measure where higher is better."""
    passed = candidate is not None and reference is not None
    if passed and measure.higher_is_better:
        passed = candidate >= reference + min_improvement and candidate > reference
    elif passed:
        passed = candidate <= reference - min_improvement and candidate < reference
    return Check(passed=passed, candidate=candidate, reference=reference, allowance=min_improvement)


def no_forgetting(old: OldScores | None) -> Check:
    """The forgetting guard: on the reference model's own holdout the candidate may be worse by at most
    `max_regression` (in its measure's unit). Not scored there: not passed."""
    if old is None:
        return Check(passed=False)
    return Check(passed=not old.forgets, candidate=old.challenger, reference=old.champion, allowance=old.max_regression)


def forgot(old: OldScores, whose: str, where: str, then: str) -> str:
    """Why a candidate that won on its own holdout is refused for what it forgot on `where`."""
    return (
        f"forgets: {old.challenger:.4f} against {whose} {old.champion:.4f} "
        f"{old.measure.unit} on {where}, worse by {old.regression:.4f}, more than the {old.max_regression} allowed; {then}"
    )
