"""The gate's figures a run records (`tasks.registry.gate_scores`): one reading for every gate, named by the
measure its inputs compare, as each kind of gate named them when each had its own code."""

from __future__ import annotations

from foundry.gates.inputs import OldHoldout, PretrainInputs, SpecialistInputs
from foundry.vision.gate_inputs import ImageSpecialistInputs, OldImageHoldout
from tasks.registry import gate_scores


def test_a_language_models_gate_records_bits_per_byte():
    old = OldHoldout(data_version="v1", max_regression=0.1, challenger_bits_per_byte=1.3, champion_bits_per_byte=1.2)
    gate = SpecialistInputs(
        challenger_bits_per_byte=1.4,
        min_improvement=0.0,
        auto_promote=True,
        champion_bits_per_byte=1.5,
        old_holdout=old,
        base="models:/base/1",
        incumbent_bits_per_byte=1.45,
    )
    assert gate_scores(gate) == {
        "gate/champion_bits_per_byte": 1.5,
        "gate/incumbent_bits_per_byte": 1.45,
        "gate/old_holdout_bits_per_byte": 1.3,
        "gate/champion_old_holdout_bits_per_byte": 1.2,
        "gate/old_holdout_regression": old.regression,
    }


def test_an_image_classifiers_gate_records_accuracy():
    old = OldImageHoldout(data_version="v1", max_regression=0.1, challenger_accuracy=0.8, champion_accuracy=0.9)
    gate = ImageSpecialistInputs(
        challenger_accuracy=0.75,
        min_improvement=0.0,
        auto_promote=True,
        champion_accuracy=0.7,
        old_holdout=old,
        base="models:/base/1",
        incumbent_accuracy=0.6,
    )
    assert gate_scores(gate) == {
        "gate/champion_accuracy": 0.7,
        "gate/incumbent_accuracy": 0.6,
        "gate/old_holdout_accuracy": 0.8,
        "gate/champion_old_holdout_accuracy": 0.9,
        "gate/old_holdout_regression": old.regression,
    }


def test_a_first_model_has_no_figures_to_record():
    gate = PretrainInputs(challenger_bits_per_byte=1.4, min_improvement=0.0, auto_promote=True)
    assert gate_scores(gate) == {}
