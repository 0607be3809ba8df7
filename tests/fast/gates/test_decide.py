"""The gates' rules (`foundry.gates`) on plain values: no registry, no files, no model. Each test forces one
outcome of one gate; the I/O that gathers the inputs is tested against a real registry in test_gate.py."""

from __future__ import annotations

import pytest
from helpers_merge import merge_score

from foundry.gates import alignment, merge, pretrain, specialist
from foundry.gates.checks import beats
from foundry.gates.inputs import (
    ACCURACY,
    AlignedScores,
    AlignmentInputs,
    HoldoutScore,
    MergeInputs,
    OldHoldout,
    PretrainInputs,
    SpecialistInputs,
)
from foundry.vision.gate_inputs import ImageInputs, OldImageHoldout


def old(challenger: float, champion: float, max_regression: float = 0.02) -> OldHoldout:
    return OldHoldout(
        data_version="old-data",
        challenger_bits_per_byte=challenger,
        champion_bits_per_byte=champion,
        max_regression=max_regression,
    )


def against_champion(challenger: float, champion: float | None, **changes) -> PretrainInputs:
    given = {"challenger_bits_per_byte": challenger, "min_improvement": 0.0, "auto_promote": True}
    if champion is not None:
        given |= {"champion_version": "3", "champion_bits_per_byte": champion, "old_holdout": old(2.0, 2.0)}
    return PretrainInputs(**(given | changes))


# --- the comparison every bits-per-byte gate makes ----------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "reference", "min_improvement", "passed"),
    [
        (1.2, 1.5, 0.0, True),
        (1.6, 1.5, 0.0, False),
        (1.5, 1.5, 0.0, False),  # a tie does not replace anything
        (1.45, 1.5, 0.1, False),  # better, by less than required
        (1.25, 1.5, 0.1, True),
        (1.0, 1.5, 0.5, True),  # exactly the required gain (exact in binary)
        (None, 1.5, 0.0, False),  # not measured: not passed
    ],
)
def test_beats_wants_lower_by_at_least_the_margin(candidate, reference, min_improvement, passed):
    assert beats(candidate, reference, min_improvement).passed is passed


# --- pretraining and retraining -----------------------------------------------------------------------


def test_pretrain_passes_without_a_champion():
    decision = pretrain.decide(against_champion(99.0, None, min_improvement=1.0))
    assert (decision.passed, decision.make_champion, decision.verdict) == (True, True, "no champion yet")


def test_pretrain_passes_a_challenger_that_beats_the_champion_and_forgets_nothing():
    decision = pretrain.decide(against_champion(1.2, 1.5))
    assert decision.passed and decision.verdict == "1.2000 beats champion's 1.5000 bits/byte"


def test_pretrain_refuses_a_challenger_that_does_not_beat_the_champion():
    decision = pretrain.decide(against_champion(1.45, 1.5, min_improvement=0.1))
    assert not decision.passed and decision.verdict == "1.4500 does not beat champion's 1.5000 bits/byte by 0.1"


def test_pretrain_refuses_a_challenger_that_forgets_the_champions_holdout():
    decision = pretrain.decide(against_champion(1.2, 1.5, old_holdout=old(2.05, 2.0)))
    assert not decision.passed and decision.verdict.startswith("forgets: 2.0500 against the champion's 2.0000")


def test_pretrain_refuses_a_champion_on_another_footing():
    decision = pretrain.decide(against_champion(1.0, None, champion_version="3", footing="not built on v3"))
    assert not decision.passed and decision.verdict == "not built on v3"


def test_pretrain_refuses_a_challenger_when_the_champion_was_not_scored():
    decision = pretrain.decide(against_champion(1.0, None, champion_version="3", old_holdout=old(2.0, 2.0)))
    assert not decision.passed and decision.verdict == "1.0000 does not beat champion's ? bits/byte by 0.0"


def test_pretrain_leaves_a_pass_to_a_reviewer_without_auto_promotion():
    decision = pretrain.decide(against_champion(1.2, 1.5, auto_promote=False))
    assert decision.passed and not decision.make_champion


def test_the_tags_of_a_decision_are_the_ones_versions_carry():
    tags = pretrain.decide(against_champion(1.6, 1.5, min_improvement=0.01, old_holdout=None)).tags()
    assert tags == {
        "gate.verdict": "1.6000 does not beat champion's 1.5000 bits/byte by 0.01",
        "gate.passed": "false",
        "gate.challenger_bits_per_byte": "1.600000",
        "gate.champion_bits_per_byte": "1.500000",
        "gate.champion_version": "3",
        "gate.min_improvement": "0.01",
        "gate.old_holdout_version": "",
        "gate.challenger_old_bits_per_byte": "",
        "gate.champion_old_bits_per_byte": "",
        "gate.max_regression": "",
    }


# --- a domain fine-tune against its base and the specialist's own champion ---------------------------


def fine_tune(challenger: float, base: float, **changes) -> SpecialistInputs:
    given = {
        "challenger_bits_per_byte": challenger,
        "min_improvement": 0.0,
        "auto_promote": True,
        "champion_version": "1",
        "champion_bits_per_byte": base,
        "old_holdout": old(2.0, 2.0),
        "base": "models:/gpt/1",
    }
    return SpecialistInputs(**(given | changes))


def test_specialist_passes_a_fine_tune_that_beats_its_base_and_its_champion():
    decision = specialist.decide(fine_tune(1.2, 1.5, incumbent_version="4", incumbent_bits_per_byte=1.3))
    assert decision.passed and decision.tags()["gate.incumbent_version"] == "4"


def test_specialist_refuses_a_fine_tune_that_does_not_beat_its_base():
    decision = specialist.decide(fine_tune(1.6, 1.5))
    assert not decision.passed and "does not beat the base's 1.5000" in decision.verdict


def test_specialist_refuses_a_fine_tune_that_forgets_the_bases_holdout():
    decision = specialist.decide(fine_tune(1.2, 1.5, old_holdout=old(2.1, 2.0)))
    assert not decision.passed and decision.verdict.startswith("forgets: 2.1000 against the base's 2.0000")


def test_specialist_is_refused_by_its_incumbent():
    decision = specialist.decide(fine_tune(1.2, 1.5, incumbent_version="4", incumbent_bits_per_byte=1.1))
    assert not decision.passed and "does not beat the specialist's champion v4 (1.1000" in decision.verdict


def test_specialist_is_refused_by_an_incumbent_it_was_not_scored_beside():
    decision = specialist.decide(fine_tune(1.2, 1.5, incumbent_version="4", incumbent_bits_per_byte=None))
    assert not decision.passed and "does not beat the specialist's champion v4 (? bits/byte)" in decision.verdict


# --- merges -------------------------------------------------------------------------------------------


def merged(*scores: HoldoutScore) -> MergeInputs:
    base_holdout = merge_score("models:/base/1", 9.0, 1.0, None)  # reported, never gated
    return MergeInputs(scores=[*scores, base_holdout], max_gap=0.05, auto_promote=True)


def test_merge_passes_when_better_than_the_base_and_close_to_each_specialist():
    decision = merge.decide(
        merged(merge_score("models:/a/1", 1.20, 1.30, 1.16), merge_score("models:/b/1", 1.24, 1.35, 1.20))
    )
    assert decision.passed and decision.tags()["gate.max_gap"] == "0.05"


def test_merge_is_refused_for_a_gap_over_max_gap():
    decision = merge.decide(
        merged(merge_score("models:/a/1", 1.20, 1.30, 1.16), merge_score("models:/b/1", 1.26, 1.35, 1.20))
    )
    assert not decision.passed and "trails the specialist's 1.2000 bits/byte by 0.0600" in decision.verdict


def test_merge_is_refused_for_not_beating_the_base():
    decision = merge.decide(
        merged(merge_score("models:/a/1", 1.31, 1.30, 1.30), merge_score("models:/b/1", 1.24, 1.35, 1.20))
    )
    assert not decision.passed and "the merge's 1.3100 does not beat the base's 1.3000" in decision.verdict


def beside_champion(incumbent_a: float | None, incumbent_b: float | None) -> MergeInputs:
    """A merge that passes its own checks (mean 1.22 on the parents' holdouts), beside champion v7 of its name."""
    a = merge_score("models:/a/1", 1.20, 1.30, 1.16).model_copy(update={"incumbent_bits_per_byte": incumbent_a})
    b = merge_score("models:/b/1", 1.24, 1.35, 1.20).model_copy(update={"incumbent_bits_per_byte": incumbent_b})
    return merged(a, b).model_copy(update={"incumbent_version": "7"})


def test_merge_passes_when_its_mean_beats_the_champion_of_its_name_on_the_same_holdouts():
    decision = merge.decide(beside_champion(1.25, 1.21))  # champion's mean 1.23
    assert decision.passed and decision.verdict.endswith("beats champion v7's 1.2300")


def test_merge_is_refused_by_a_stronger_champion_of_its_name():
    decision = merge.decide(beside_champion(1.15, 1.25))  # champion's mean 1.20, though worse on b
    assert not decision.passed and decision.verdict == (
        "the merge's mean 1.2200 bits/byte on the parents' holdouts does not beat champion v7's 1.2000"
    )


def test_merge_is_refused_by_a_champion_not_scored_on_every_parents_holdout():
    check = merge.decide(beside_champion(1.25, None)).checks["beats_incumbent"]
    assert (check.passed, check.candidate, check.reference) == (False, pytest.approx(1.22), None)


# --- alignment against its base and the champion of its name ------------------------------------------


def sft(response_loss: float, pretrain_bpb: float = 2.01, **changes) -> AlignmentInputs:
    given = {
        "method": "sft",
        "aligned": AlignedScores(response_loss=response_loss, pretrain_bits_per_byte=pretrain_bpb),
        "base": AlignedScores(response_loss=3.0, pretrain_bits_per_byte=2.0),
        "max_regression": 0.02,
        "auto_promote": True,
    }
    return AlignmentInputs(**(given | changes))


def test_alignment_passes_sft_that_learns_without_forgetting():
    assert alignment.decide(sft(0.4)).passed


def test_alignment_refuses_sft_that_does_not_beat_its_base():
    decision = alignment.decide(sft(3.1))
    assert not decision.passed and "FAILED response_loss 3.1000 vs base 3.0000" in decision.verdict


def test_alignment_refuses_sft_that_forgets_pretraining():
    decision = alignment.decide(sft(0.4, pretrain_bpb=2.03))
    assert not decision.passed and decision.tags()["gate.check.pretrain_regression"] == "false"


def test_alignment_is_refused_by_its_incumbent():
    decision = alignment.decide(sft(0.4, incumbent_version="2", incumbent=AlignedScores(response_loss=0.3)))
    assert not decision.passed and "FAILED response_loss 0.4000 vs champion v2 0.3000" in decision.verdict


def test_alignment_is_refused_by_an_incumbent_it_could_not_be_compared_with():
    decision = alignment.decide(sft(0.4, incumbent_version="2", incumbent=None))  # another tokenizer
    assert not decision.passed and decision.tags()["gate.check.beats_incumbent"] == "false"


def test_alignment_passes_dpo_that_wins_as_many_preferences_as_its_incumbent_with_a_wider_margin():
    dpo = AlignmentInputs(
        method="dpo",
        aligned=AlignedScores(preference_accuracy=1.0, preference_margin=6.0, pretrain_bits_per_byte=2.0),
        base=AlignedScores(preference_accuracy=0.8, preference_margin=1.5, pretrain_bits_per_byte=2.0),
        max_regression=0.02,
        auto_promote=True,
        incumbent_version="1",
        incumbent=AlignedScores(preference_accuracy=1.0, preference_margin=5.0),
    )
    assert alignment.decide(dpo).passed


# --- image classifiers: the pretraining rule by holdout accuracy, higher is better ---------------------


def old_images(challenger: float, champion: float, max_regression: float = 0.02) -> OldImageHoldout:
    return OldImageHoldout(
        data_version="old-images",
        challenger_accuracy=challenger,
        champion_accuracy=champion,
        max_regression=max_regression,
    )


def images_against_champion(challenger: float, champion: float | None, **changes) -> ImageInputs:
    given = {"challenger_accuracy": challenger, "min_improvement": 0.0, "auto_promote": True}
    if champion is not None:
        given |= {"champion_version": "3", "champion_accuracy": champion, "old_holdout": old_images(0.9, 0.9)}
    return ImageInputs(**(given | changes))


@pytest.mark.parametrize(
    ("candidate", "reference", "min_improvement", "passed"),
    [
        (0.95, 0.9, 0.0, True),
        (0.85, 0.9, 0.0, False),
        (0.9, 0.9, 0.0, False),  # a tie does not replace anything
        (0.92, 0.9, 0.05, False),  # better, by less than required
        (0.75, 0.5, 0.25, True),  # exactly the required gain (exact in binary)
        (None, 0.9, 0.0, False),
    ],
)
def test_beats_wants_higher_accuracy_by_at_least_the_margin(candidate, reference, min_improvement, passed):
    assert beats(candidate, reference, min_improvement, ACCURACY).passed is passed


def test_images_pass_without_a_champion():
    decision = pretrain.decide(images_against_champion(0.1, None))
    assert (decision.passed, decision.make_champion, decision.verdict) == (True, True, "no champion yet")


def test_images_promote_a_classifier_more_accurate_than_the_champion_that_forgets_nothing():
    decision = pretrain.decide(images_against_champion(0.95, 0.9, old_holdout=old_images(0.89, 0.9)))
    assert (decision.passed, decision.make_champion) == (True, True)
    assert decision.verdict == "0.9500 beats champion's 0.9000 accuracy"
    assert decision.checks["no_forgetting"].passed and decision.tags()["gate.champion_accuracy"] == "0.900000"


def test_images_refuse_a_classifier_less_accurate_than_the_champion():
    decision = pretrain.decide(images_against_champion(0.85, 0.9))
    assert not decision.passed and decision.verdict == "0.8500 does not beat champion's 0.9000 accuracy by 0.0"


def test_images_refuse_a_classifier_that_forgets_the_champions_holdout():
    decision = pretrain.decide(images_against_champion(0.95, 0.9, old_holdout=old_images(0.85, 0.9)))
    assert not decision.passed and not decision.checks["no_forgetting"].passed
    assert decision.verdict.startswith("forgets: 0.8500 against the champion's 0.9000 accuracy")
    assert "worse by 0.0500" in decision.verdict


def test_images_refuse_a_champion_on_another_footing():
    decision = pretrain.decide(images_against_champion(0.99, None, champion_version="3", footing="other data"))
    assert (decision.passed, decision.verdict) == (False, "other data")
