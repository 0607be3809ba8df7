"""foundry.core.open_union: the fields that took one of a closed list of types (a candidate's metrics, a training
result's, a decision's inputs) take any registered subclass, and read every stored shape as the closed unions did.

Each payload is read by the new field type and by the closed union it replaced, built here from the concrete
classes: the same type and value, or an error from both; the same JSON back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field, TypeAdapter, ValidationError

from foundry.core.contracts import Candidate, DataVersion, PipelineResult, Promotion, RunContext
from foundry.core.metrics.aligned import AlignedScores, AlignmentMetrics
from foundry.core.metrics.baselines import AnyBaselined
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.core.metrics.images import VisionMetrics
from foundry.core.metrics.kinds import AnyMetrics, Metrics
from foundry.gates import alignment, merge, pretrain, specialist
from foundry.gates.decision import Decision, Inputs
from foundry.gates.inputs import (
    AlignmentInputs,
    HoldoutScore,
    MergeInputs,
    OldHoldout,
    PretrainInputs,
    SpecialistInputs,
)
from foundry.vision.gate_inputs import ImageInputs, ImageSpecialistInputs, OldImageHoldout

# The closed unions as they were declared before (contracts.Candidate, contracts.PipelineResult, decision.Inputs).
OLD_CANDIDATE_METRICS = TypeAdapter(HoldoutMetrics | AlignmentMetrics | VisionMetrics)
OLD_RESULT_METRICS = TypeAdapter(HoldoutMetrics | VisionMetrics)
OLD_INPUTS = TypeAdapter(
    Annotated[
        PretrainInputs | SpecialistInputs | MergeInputs | AlignmentInputs | ImageInputs | ImageSpecialistInputs,
        Field(discriminator="gate"),
    ]
)
NEW_CANDIDATE_METRICS, NEW_RESULT_METRICS, NEW_INPUTS = (
    TypeAdapter(AnyMetrics),
    TypeAdapter(AnyBaselined),
    TypeAdapter(Inputs),
)

HOLDOUT = HoldoutMetrics(
    loss=0.9,
    perplexity=2.46,
    bits_per_byte=1.3,
    tokens=512,
    unigram_bits_per_byte=4.1,
    gzip_bits_per_byte=2.12,
    xz_bits_per_byte=1.54,
    xz9e_bits_per_byte=1.5119,
    ppmd_bits_per_byte=1.3364,
    baseline_train_bytes=1 << 20,
)
MERGED = HoldoutMetrics(bits_per_byte=2.5)  # a merge scores nothing else
VISION = VisionMetrics(
    accuracy=0.9, macro_f1=0.88, loss=0.3, images=30, majority_accuracy=0.34, per_class_accuracy={"dark": 1.0}
)
ALIGNED = AlignmentMetrics(
    aligned=AlignedScores(response_loss=0.4, pretrain_bits_per_byte=2.015),
    base=AlignedScores(response_loss=3.0, pretrain_bits_per_byte=2.0),
)
METRICS_VALUES = [HOLDOUT, MERGED, VISION, ALIGNED]

OLD = OldHoldout(data_version="o" * 32, challenger_bits_per_byte=2.0, champion_bits_per_byte=2.01, max_regression=0.02)
OLD_IMAGES = OldImageHoldout(data_version="v0", challenger_accuracy=0.79, champion_accuracy=0.8, max_regression=0.02)
DECISIONS = [
    pretrain.decide(PretrainInputs(challenger_bits_per_byte=1.2, min_improvement=0.0, auto_promote=True)),
    pretrain.decide(
        PretrainInputs(
            challenger_bits_per_byte=1.2,
            min_improvement=0.0,
            auto_promote=True,
            champion_version="3",
            champion_bits_per_byte=1.5,
            old_holdout=OLD.model_copy(update={"replaces": "r" * 32, "purge_record": "p1"}),
        )
    ),
    pretrain.decide(PretrainInputs(challenger_bits_per_byte=1.2, min_improvement=0, auto_promote=True, footing="no")),
    pretrain.decide(
        ImageInputs(
            challenger_accuracy=0.9,
            min_improvement=0.0,
            auto_promote=False,
            champion_version="2",
            champion_accuracy=0.8,
            old_holdout=OLD_IMAGES,
        )
    ),
    specialist.decide(
        SpecialistInputs(
            challenger_bits_per_byte=1.2,
            min_improvement=0.0,
            auto_promote=True,
            champion_version="1",
            champion_bits_per_byte=1.5,
            old_holdout=OLD,
            base="models:/gpt/1",
            incumbent_version="4",
            incumbent_bits_per_byte=1.1,
        )
    ),
    specialist.decide(
        ImageSpecialistInputs(
            challenger_accuracy=0.9,
            min_improvement=0.0,
            auto_promote=True,
            champion_version="1",
            champion_accuracy=0.8,
            old_holdout=OLD_IMAGES,
            base="models:/img-base/1",
        )
    ),
    merge.decide(
        MergeInputs(
            scores=[
                HoldoutScore(holdout_of="models:/a/1", data_version="d", merged_bits_per_byte=1, base_bits_per_byte=1.1)
            ],
            max_gap=0.1,
            auto_promote=True,
            incumbent_version="2",
        )
    ),
    alignment.decide(
        AlignmentInputs(
            method="dpo",
            aligned=AlignedScores(response_loss=0.4, preference_accuracy=0.9),
            base=AlignedScores(response_loss=3.0, preference_accuracy=0.5),
            max_regression=0.05,
            auto_promote=False,
        )
    ),
]


def candidate(metrics: Metrics, tmp: Path = Path("/runs/r1")) -> Candidate:
    run = RunContext(run_id="r1", dir=tmp, home=tmp.parent)
    data = DataVersion(data_version="a" * 32, remote="s3://bucket/dvc")
    return Candidate(checkpoint=tmp / "model.pt", data=data, data_dir=tmp / "data", metrics=metrics, run=run)


def stored(values: list) -> list[Any]:
    """Each value as Python and as JSON keep it: its dump, and that dump read back from JSON text."""
    return [v.model_dump() for v in values] + [v.model_dump(mode="json") for v in values]


def broken(values: list) -> list[Any]:
    """Shapes none of the types takes, or only by coercion: empty, mixed, with a field too many, as strings."""
    first = values[0].model_dump(mode="json")
    return [{}, {"x": 1}, None, 3, "text", {**first, "extra": 1}, {k: str(v) for k, v in first.items()}]


METRICS_PAYLOADS = (
    METRICS_VALUES
    + stored(METRICS_VALUES)
    + broken(METRICS_VALUES)
    + [
        {"bits_per_byte": "1.5"},  # a tag read back as a string
        {"accuracy": 1, "per_class_accuracy": {"a": "0.5"}},
        {"bits_per_byte": 1.0, "accuracy": 0.5},  # the fields of two types at once
        {"aligned": {}, "base": {}},
        {"aligned": {}, "base": {}, "bits_per_byte": 1.0},
        AlignedScores(response_loss=1.0),  # a model, but not metrics
    ]
)
INPUTS_PAYLOADS = (
    [d.inputs for d in DECISIONS]
    + stored([d.inputs for d in DECISIONS])
    + broken([d.inputs for d in DECISIONS])
    + [
        {"gate": "audio", "challenger_bits_per_byte": 1.0},  # a gate nobody registered
        {"challenger_bits_per_byte": 1.0, "min_improvement": 0, "auto_promote": True},  # no gate
        {"gate": "image", "challenger_bits_per_byte": 1.0, "min_improvement": 0, "auto_promote": True},
        {**DECISIONS[0].inputs.model_dump(mode="json"), "gate": "specialist"},  # a specialist without its base
        OLD,  # a model, but no gate's inputs
    ]
)


def read(adapter: TypeAdapter, payload: Any) -> tuple[type, Any] | str:
    try:
        value = adapter.validate_python(payload)
    except ValidationError:
        return "invalid"
    return type(value), value


@pytest.mark.parametrize(
    ("old", "new", "payloads"),
    [
        (OLD_CANDIDATE_METRICS, NEW_CANDIDATE_METRICS, METRICS_PAYLOADS),
        (OLD_RESULT_METRICS, NEW_RESULT_METRICS, METRICS_PAYLOADS),
        (OLD_INPUTS, NEW_INPUTS, INPUTS_PAYLOADS),
    ],
    ids=["candidate metrics", "result metrics", "gate inputs"],
)
def test_every_stored_shape_reads_as_the_closed_union_read_it(old, new, payloads):
    outcomes = [(read(old, payload), read(new, payload)) for payload in payloads]
    assert [was for was, _ in outcomes] == [now for _, now in outcomes]
    kept = [was for was, _ in outcomes if was != "invalid"]
    assert 0 < len(kept) < len(outcomes)  # some payloads are read, some refused by both
    for _, value in kept:  # and what was read writes the same JSON back
        assert new.dump_json(value) == old.dump_json(value)
        assert new.dump_python(value, mode="json") == old.dump_python(value, mode="json")


def test_a_candidate_result_and_decision_keep_their_json_and_read_it_back_equal():
    for metrics in METRICS_VALUES:
        c = candidate(metrics)
        assert c.model_dump_json() == _old_json(c, OLD_CANDIDATE_METRICS)
        back = Candidate.model_validate_json(c.model_dump_json())
        assert back == c and type(back.metrics) is type(metrics)
        if isinstance(metrics, HoldoutMetrics | VisionMetrics):
            result = PipelineResult.of(c, "gpt", Promotion(version="3", promoted=True, verdict="ok"))
            assert result.model_dump_json() == _old_json(result, OLD_RESULT_METRICS)
            assert PipelineResult.model_validate_json(result.model_dump_json()) == result
    for decision in DECISIONS:
        text = decision.model_dump_json()
        assert text == _old_json(decision, OLD_INPUTS, field="inputs")
        back = Decision.model_validate_json(text)
        assert back == decision and type(back.inputs) is type(decision.inputs) and back.tags() == decision.tags()


def _old_json(value, union: TypeAdapter, field: str = "metrics") -> str:
    """The value's JSON as the closed union wrote it: the field dumped by that union, the rest as it is."""
    dumped = value.model_dump(mode="json") | {field: union.dump_python(getattr(value, field), mode="json")}
    return TypeAdapter(dict).dump_json(dumped).decode()


def test_a_training_result_still_refuses_an_aligned_models_metrics():
    with pytest.raises(ValidationError):
        PipelineResult.of(candidate(ALIGNED), "chat", Promotion(version="1", promoted=False, verdict="x"))


def test_a_second_type_under_a_kind_already_taken_is_refused():
    with pytest.raises(TypeError, match="'holdout', already foundry.core.metrics.holdout.HoldoutMetrics's"):

        class Imposter(Metrics):
            kind = "holdout"
            bits: float

    assert type(NEW_CANDIDATE_METRICS.validate_python({"bits_per_byte": 1.0})) is HoldoutMetrics
