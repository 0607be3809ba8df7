"""The merge gate's inputs and the merged model's card; the rule itself is `foundry.gates.merge`."""

from __future__ import annotations

from foundry.config import FoundryConfig
from foundry.gates.decision import Decision
from foundry.gates.inputs import HoldoutScore, MergeInputs


def merge_inputs(scores: list[HoldoutScore], config: FoundryConfig) -> MergeInputs:
    """The merge gate's inputs: the scores, `merge.max_gap` and whether a pass promotes (`foundry.gates.merge`)."""
    return MergeInputs(scores=scores, max_gap=config.merge.max_gap, auto_promote=config.registry.auto_promote)


def merge_card(name: str, recipe: dict, decision: Decision, n_params: int, run_id: str) -> str:
    """Markdown for the merged version's description in the registry: the recipe, the scores, the verdict."""
    rows = "\n".join(
        f"| {s.holdout_of} | {s.data_version[:12]} | {s.merged_bits_per_byte:.4f} | {s.base_bits_per_byte:.4f} | "
        f"{'-' if s.specialist_bits_per_byte is None else f'{s.specialist_bits_per_byte:.4f}'} |"
        for s in decision.inputs.scores
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
