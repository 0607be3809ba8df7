"""foundry.core.metrics.aligned: an aligned model's scores beside its base's name their MLflow keys in one place, read
back equal, and are what the flows hand on (Candidate, AlignResult; PipelineResult holds HoldoutMetrics)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from foundry.core.contracts import AlignResult, Candidate, DataVersion, PipelineResult, Promotion, RunContext
from foundry.core.metrics.aligned import AlignedScores, AlignmentMetrics
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.reports.summaries import align_summary

# As the align flow logs them on its run (sft on chat data, with a pretraining holdout to compare on).
LOGGED = {
    "base/response_loss": 3.0,
    "align/response_loss": 0.4,
    "base/pretrain_bits_per_byte": 2.0,
    "align/pretrain_bits_per_byte": 2.015,
}
SFT = AlignmentMetrics(
    aligned=AlignedScores(response_loss=0.4, pretrain_bits_per_byte=2.015),
    base=AlignedScores(response_loss=3.0, pretrain_bits_per_byte=2.0),
)


def test_the_mlflow_keys_are_align_and_base_and_read_back_equal():
    assert SFT.as_mlflow() == LOGGED
    assert AlignmentMetrics.from_mlflow({**LOGGED, "train/loss": 1.0, "incumbent/response_loss": 0.3}) == SFT


def test_a_measure_the_base_lacks_is_compared_as_missing_and_unmeasured_ones_are_left_out():
    metrics = AlignmentMetrics.from_mlflow({"align/response_loss": 0.4, "base/preference_margin": 1.0})
    assert metrics.compared() == {"response_loss": (None, 0.4)}
    assert metrics.as_mlflow() == {"base/preference_margin": 1.0, "align/response_loss": 0.4}


def test_the_champion_held_to_is_logged_under_incumbent():
    assert AlignedScores(preference_accuracy=1.0).as_mlflow("incumbent") == {"incumbent/preference_accuracy": 1.0}


def test_an_align_result_prints_each_measure_beside_the_base_and_persists_as_json():
    result = AlignResult(
        run_id="r1",
        model_name="chat",
        model_version="2",
        data_version="d" * 32,
        parent="models:/gpt/1",
        method="sft",
        metrics=AlignmentMetrics.from_mlflow({"align/response_loss": 0.4, "base/response_loss": 3.0}),
        promoted=True,
        verdict="passed",
    )
    lines = align_summary(result).splitlines()
    assert [line.split() for line in lines if "response_loss" in line] == [
        ["response_loss", "base", "3.0000", "aligned", "0.4000"]
    ]
    assert AlignResult.model_validate_json(result.model_dump_json()) == result  # as Prefect persists it


def test_a_candidate_keeps_its_kind_of_metrics(tmp_path: Path):
    run = RunContext(run_id="r1", dir=tmp_path, home=tmp_path)
    parts = {"checkpoint": tmp_path / "model.pt", "data": DataVersion(data_version="a" * 32, remote="r")}
    aligned = Candidate(**parts, data_dir=tmp_path, metrics=SFT, run=run)
    trained = Candidate(**parts, data_dir=tmp_path, metrics=HoldoutMetrics(bits_per_byte=2.5, loss=1.7), run=run)
    assert isinstance(aligned.metrics, AlignmentMetrics) and isinstance(trained.metrics, HoldoutMetrics)
    assert Candidate.model_validate_json(aligned.model_dump_json()).metrics == SFT
    assert Candidate.model_validate_json(trained.model_dump_json()).metrics == trained.metrics


def test_a_pipeline_result_holds_the_candidates_holdout_metrics(tmp_path: Path):
    held = HoldoutMetrics(bits_per_byte=2.5, loss=1.7, perplexity=math.exp(1.7), tokens=512)
    run = RunContext(run_id="r1", dir=tmp_path, home=tmp_path)
    data = DataVersion(data_version="a" * 32, remote="r")
    candidate = Candidate(checkpoint=tmp_path / "model.pt", data=data, data_dir=tmp_path, metrics=held, run=run)
    result = PipelineResult.of(candidate, "gpt", Promotion(version="3", promoted=False, verdict="review"))
    assert result.metrics.bits_per_byte == 2.5 and result.metrics.tokens == 512
    assert PipelineResult.model_validate_json(result.model_dump_json()) == result


def test_a_pipeline_result_refuses_alignment_metrics():
    with pytest.raises(ValueError, match="bits_per_byte"):
        PipelineResult(
            run_id="r1",
            model_name="gpt",
            model_version="1",
            data_version="a" * 32,
            metrics=SFT,
            promoted=False,
            verdict="x",
        )
