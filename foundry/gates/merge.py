"""The merge gate: a merge is worth keeping when it beats the base on every parent's holdout (it kept
something of each specialisation) and is within `merge.max_gap` bits per byte of each specialist on that
specialist's own holdout (it did not dilute any of them too far). The base's own holdout is reported only."""

from __future__ import annotations

from foundry.gates.checks import beats
from foundry.gates.decision import Check, Decision
from foundry.gates.inputs import MergeInputs


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
    parents = sum(s.specialist_bits_per_byte is not None for s in i.scores)
    verdict = "; ".join(problems) or (
        f"beats the base on all {parents} parents' holdouts and is within {i.max_gap} bits/byte of each specialist"
    )
    return Decision.of(i, checks, verdict)
