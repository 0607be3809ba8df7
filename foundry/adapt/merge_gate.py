"""The merge gate and the merged model's card.

A merge is worth keeping when it is better than the base on every parent's holdout (it kept something of
each specialisation) and within `merge.max_gap` bits per byte of each specialist on that specialist's own
holdout (it did not dilute any of them too far). The base's own holdout is scored and reported, not gated.
"""

from __future__ import annotations

from foundry.adapt.contracts import HoldoutScore, MergeDecision
from foundry.config import FoundryConfig


def shortfalls(scores: list[HoldoutScore], max_gap: float) -> list[str]:
    """Why the merge fails the gate, one sentence per parent holdout that it fails on ([] when it passes)."""
    found = []
    for s in scores:
        if s.specialist_bits_per_byte is None:
            continue  # the base's own holdout: reported only
        where = f"on {s.holdout_of}'s holdout"
        if not s.merged_bits_per_byte < s.base_bits_per_byte:
            found.append(
                f"{where} the merge's {s.merged_bits_per_byte:.4f} does not beat the base's "
                f"{s.base_bits_per_byte:.4f} bits/byte"
            )
        gap = s.merged_bits_per_byte - s.specialist_bits_per_byte
        if gap > max_gap:
            found.append(
                f"{where} the merge's {s.merged_bits_per_byte:.4f} trails the specialist's "
                f"{s.specialist_bits_per_byte:.4f} bits/byte by {gap:.4f}, more than merge.max_gap {max_gap}"
            )
    return found


def decide_merge(scores: list[HoldoutScore], config: FoundryConfig) -> MergeDecision:
    """Passed when there is no shortfall; champion of the merged model's name only when passed and
    `registry.auto_promote` is on."""
    max_gap = config.merge.max_gap
    problems = shortfalls(scores, max_gap)
    parents = sum(s.specialist_bits_per_byte is not None for s in scores)
    verdict = "; ".join(problems) or (
        f"beats the base on all {parents} parents' holdouts and is within {max_gap} bits/byte of each specialist"
    )
    passed = not problems
    return MergeDecision(
        passed=passed,
        make_champion=passed and config.registry.auto_promote,
        verdict=verdict,
        max_gap=max_gap,
        scores=scores,
    )


def merge_card(name: str, recipe: dict, decision: MergeDecision, n_params: int, run_id: str) -> str:
    """Markdown for the merged version's description in the registry: the recipe, the scores, the verdict."""
    rows = "\n".join(
        f"| {s.holdout_of} | {s.data_version[:12]} | {s.merged_bits_per_byte:.4f} | {s.base_bits_per_byte:.4f} | "
        f"{'-' if s.specialist_bits_per_byte is None else f'{s.specialist_bits_per_byte:.4f}'} |"
        for s in decision.scores
    )
    weights = ", ".join(f"{uri} x {w}" for uri, w in zip(recipe["models"], recipe["weights"]))
    return f"""# {name}: a {recipe["method"]} merge, {n_params / 1e6:.2f}M parameters

**Verdict:** {decision.verdict}

## Recipe (no training)
- method `{recipe["method"]}`, base `{recipe["base"]}`
- models and weights: {weights}
- density {recipe["density"]}, scale (lambda) {recipe["scale"]}, seed {recipe["seed"]}

## Holdouts (bits per byte, lower is better)
| holdout of | data | merged | base | specialist |
|---|---|---|---|---|
{rows}

MLflow run `{run_id}`. Reproduce: `foundry merge {" ".join(recipe["models"])} --method {recipe["method"]} --base {recipe["base"]}` with the same weights, density, scale and seed.
"""
