"""The merge gate's I/O (`foundry.specialists.gate.gather_merge`) against a real MLflow registry and a real DVC
remote, without Prefect: the champion of the merge's name re-scored on the holdouts the merge was scored on. The
rule itself: tests/fast/gates/test_decide.py."""

# ruff: noqa: F811  (the fixtures imported from helpers_gate are test arguments here)
from __future__ import annotations

import pytest
from helpers_gate import (  # noqa: F401  (fixtures)
    champion_checkpoint,
    named,
    old_data,
    register_champion,
)

from foundry.pretrain.holdout_metrics import gate_score


def test_a_merge_is_held_to_the_champion_of_its_name_rescored_on_the_same_holdouts(
    tiny_config, old_data, champion_checkpoint, foundry_home
):
    """`gather_merge` scores the champion of the merge's name on each holdout the merge was scored on (here the
    champion's own); a merge that passes its own checks but scores worse is refused."""
    from foundry.gates import merge
    from foundry.specialists.contracts import HoldoutScore
    from foundry.specialists.gate import gather_merge

    data, folder = old_data
    config = named(tiny_config, "gate-merged")
    tags = {"data_version": data.data_version, "data.remote": data.remote}
    version = register_champion(config, champion_checkpoint, folder / "tokenizer.json", tags)
    expected = gate_score(champion_checkpoint, folder / "tokenizer.json", folder, config)
    worse = expected + 0.01  # beats the base and stays within max_gap of the specialist, not the champion
    held = HoldoutScore(
        holdout_of=f"models:/gate-merged/{version}",
        data_version=data.data_version,
        merged_bits_per_byte=worse,
        base_bits_per_byte=worse + 1.0,
        specialist_bits_per_byte=worse,
    )
    inputs = gather_merge(config, [held], "gate-merged", foundry_home)
    assert inputs.scores[0].incumbent_bits_per_byte == pytest.approx(expected, rel=1e-9)
    decision = merge.decide(inputs)
    assert [n for n, c in decision.checks.items() if not c.passed] == ["beats_incumbent"] and not decision.passed
