"""A fourth workload's metrics and gate inputs, defined here as a workload's own folder would define them, with no
edit to the core: a candidate, a training flow's result and a gate's decision take them, keep their fields in JSON
and read them back as themselves; the pretraining and specialist rules judge them by their own measure."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from foundry.core.contracts import Candidate, DataVersion, PipelineResult, Promotion, RunContext
from foundry.core.metrics.baselines import BaselinedMetrics
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.gates import pretrain, specialist
from foundry.gates.decision import Decision
from foundry.gates.inputs import AgainstBase, AgainstChampion, Measure, OldScores, PretrainInputs

WORD_ACCURACY = Measure("word_accuracy", "word accuracy", higher_is_better=True)


class AudioMetrics(BaselinedMetrics):
    """A speech recogniser's holdout: words right, beside always answering the commonest word."""

    kind: ClassVar[str] = "audio (test)"
    word_accuracy: float
    clips: int | None = None
    commonest_word_accuracy: float | None = None

    BASELINES: ClassVar[tuple[str, ...]] = ("commonest_word",)
    GATE_FIGURE: ClassVar[str] = "word_accuracy"
    BASELINE_SUFFIX: ClassVar[str] = "_accuracy"
    HIGHER_IS_BETTER: ClassVar[bool] = True


class OldAudioHoldout(OldScores):
    measure: ClassVar[Measure] = WORD_ACCURACY
    challenger_word_accuracy: float
    champion_word_accuracy: float


class AudioInputs(AgainstChampion):
    measure: ClassVar[Measure] = WORD_ACCURACY
    gate: Literal["audio_test"] = "audio_test"
    challenger_word_accuracy: float
    min_improvement: float
    auto_promote: bool
    champion_version: str | None = None
    champion_word_accuracy: float | None = None
    old_holdout: OldAudioHoldout | None = None
    footing: str = ""


class AudioSpecialistInputs(AudioInputs, AgainstBase):
    gate: Literal["audio_specialist_test"] = "audio_specialist_test"
    base: str
    incumbent_version: str | None = None
    incumbent_word_accuracy: float | None = None


METRICS = AudioMetrics(word_accuracy=0.82, clips=40, commonest_word_accuracy=0.1)
OLD = OldAudioHoldout(
    data_version="o" * 32, challenger_word_accuracy=0.7, champion_word_accuracy=0.71, max_regression=0.02
)


def candidate(metrics) -> Candidate:
    run = RunContext(run_id="r1", dir=Path("/runs/r1"), home=Path("/runs"))
    data = DataVersion(data_version="a" * 32, remote="s3://bucket/dvc")
    return Candidate(checkpoint=Path("/runs/r1/model.pt"), data=data, data_dir=Path("/d"), metrics=metrics, run=run)


def test_a_candidate_and_a_training_result_hold_its_metrics_and_read_them_back():
    c = candidate(METRICS)
    text = c.model_dump_json()
    assert '"metrics":{"word_accuracy":0.82,"clips":40,"commonest_word_accuracy":0.1}' in text
    back = Candidate.model_validate_json(text)
    assert back == c and type(back.metrics) is AudioMetrics
    result = PipelineResult.of(c, "asr", Promotion(version="1", promoted=True, verdict="no champion yet"))
    again = PipelineResult.model_validate_json(result.model_dump_json())
    assert again == result and again.metrics.strongest_baseline() == ("commonest_word", 0.1)
    assert (
        type(Candidate.model_validate_json(candidate(HoldoutMetrics(bits_per_byte=1.0)).model_dump_json()).metrics)
        is HoldoutMetrics
    )


def test_the_pretraining_rule_judges_it_by_its_measure_and_the_decision_reads_back():
    inputs = AudioInputs(
        challenger_word_accuracy=0.82,
        min_improvement=0.01,
        auto_promote=True,
        champion_version="2",
        champion_word_accuracy=0.8,
        old_holdout=OLD,
    )
    decision = pretrain.decide(inputs)
    assert decision.passed and decision.verdict == "0.8200 beats champion's 0.8000 word accuracy"
    assert decision.tags()["gate.champion_word_accuracy"] == "0.800000"
    back = Decision.model_validate_json(decision.model_dump_json())
    assert back == decision and type(back.inputs) is AudioInputs and back.gate == "audio_test"
    text_decision = pretrain.decide(PretrainInputs(challenger_bits_per_byte=1.0, min_improvement=0, auto_promote=True))
    assert type(Decision.model_validate_json(text_decision.model_dump_json()).inputs) is PretrainInputs


def test_the_specialist_rule_holds_it_to_its_base_and_its_own_champion():
    inputs = AudioSpecialistInputs(
        challenger_word_accuracy=0.82,
        min_improvement=0.0,
        auto_promote=True,
        champion_version="1",
        champion_word_accuracy=0.8,
        old_holdout=OLD,
        base="models:/asr/1",
        incumbent_version="3",
        incumbent_word_accuracy=0.9,
    )
    decision = specialist.decide(inputs)
    assert not decision.passed and decision.verdict.startswith(
        "0.8200 does not beat the specialist's champion v3 (0.9000 word accuracy)"
    )
    back = Decision.model_validate(decision.model_dump(mode="json"))
    assert back == decision and type(back.inputs) is AudioSpecialistInputs
