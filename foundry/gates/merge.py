"""The merge gate: a merge is worth keeping when it beats the base on every parent's holdout (it kept
something of each specialisation) and is within `merge.max_gap` bits per byte of each specialist on that
specialist's own holdout (it did not dilute any of them too far), and when the name it registers under has a
champion, a lower mean bits per byte than that champion over the same parents' holdouts, or a weaker merge
would replace a stronger one; a champion not scored on one of them fails the check. The base's own holdout is
reported only."""

from __future__ import annotations

from foundry.gates.checks import beats
from foundry.gates.decision import Check, Decision
from foundry.gates.inputs import HoldoutScore, MergeInputs


def decide(i: MergeInputs) -> Decision:
    checks, problems = {}, []
    for s in i.scores:
        if s.specialist_bits_per_byte is None:
            continue  # the base's own holdout: reported only
        where = f"on {s.holdout_of}'s holdout"
        merged, specialist = s.merged_bits_per_byte, s.specialist_bits_per_byte
        checks[f"beats_base:{s.holdout_of}"] = better = beats(merged, s.base_bits_per_byte)
        if not better.passed:
            problems.append(
                f"{where} the merge's {merged:.4f} does not beat the base's {s.base_bits_per_byte:.4f} bits/byte"
            )
        gap = merged - specialist
        checks[f"within_gap:{s.holdout_of}"] = Check(
            passed=gap <= i.max_gap, candidate=merged, reference=specialist, allowance=i.max_gap
        )
        if gap > i.max_gap:
            problems.append(
                f"{where} the merge's {merged:.4f} trails the specialist's {specialist:.4f} bits/byte by "
                f"{gap:.4f}, more than merge.max_gap {i.max_gap}"
            )
    gated = [s for s in i.scores if s.specialist_bits_per_byte is not None]
    verdict = (
        f"beats the base on all {len(gated)} parents' holdouts and is within {i.max_gap} bits/byte of each specialist"
    )
    if i.incumbent_version is not None:
        checks["beats_incumbent"] = incumbent = _beats_incumbent(gated)
        compared = f"the merge's mean {_shown(incumbent.candidate)} bits/byte on the parents' holdouts "
        compared += f"{'beats' if incumbent.passed else 'does not beat'} champion v{i.incumbent_version}'s "
        compared += _shown(incumbent.reference)
        verdict = f"{verdict}; {compared}"
        if not incumbent.passed:
            problems.append(compared)
    return Decision.of(i, checks, "; ".join(problems) or verdict)


def _beats_incumbent(gated: list[HoldoutScore]) -> Check:
    """Mean bits per byte over the parents' holdouts, lower than the champion's on the same ones; a holdout the
    champion was not scored on leaves nothing to compare (not passed)."""
    merged = sum(s.merged_bits_per_byte for s in gated) / len(gated) if gated else None
    if not gated or any(s.incumbent_bits_per_byte is None for s in gated):
        return Check(passed=False, candidate=merged)
    return beats(merged, sum(s.incumbent_bits_per_byte for s in gated) / len(gated))


def _shown(value: float | None) -> str:
    return "?" if value is None else f"{value:.4f}"
