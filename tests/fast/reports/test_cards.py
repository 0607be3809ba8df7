"""foundry.reports: how the model card and the run summary name the strongest baseline, for new versions and for
versions recorded before it, an image classifier's summary and an aligned version's card (the baselines themselves:
tests/fast/pretrain/test_baselines.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from foundry.config import load_config
from foundry.core.contracts import Candidate, DataVersion, PipelineResult, Promotion, RunContext
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.core.version_tags import VersionTags
from foundry.data.manifest import DatasetManifest
from foundry.gates import pretrain
from foundry.gates.inputs import PretrainInputs
from foundry.reports.cards import model_card, summary_table
from foundry.reports.summaries import pipeline_summary

# A version from before the strong baselines, and one after (the default run's figures, 2026-12-01).
OLD = HoldoutMetrics(
    bits_per_byte=1.56, loss=1.2, perplexity=3.3, tokens=4096, gzip_bits_per_byte=2.12, xz_bits_per_byte=1.54
)
NEW = OLD.with_scores({"xz9e_bits_per_byte": 1.5119, "ppmd_bits_per_byte": 1.3364, "baseline_train_bytes": 10484346})


def card(metrics: HoldoutMetrics, *overrides: str) -> str:
    manifest = DatasetManifest(
        source="stdlib://",
        source_digest="0" * 64,
        source_skipped={},
        stats={"train_docs": 30, "holdout_docs": 5},
        holdout_fraction=0.1,
        vocab_size=300,
        eot_id=0,
        dtype="uint16",
        shards=[],
        train_tokens=1000,
        holdout_tokens=100,
    )
    decision = pretrain.decide(
        PretrainInputs(challenger_bits_per_byte=metrics.bits_per_byte, min_improvement=0.0, auto_promote=True)
    )
    tags = VersionTags(run_id="run1", data_version="a" * 32, data_remote="r")
    return model_card(load_config(None, list(overrides)), manifest, metrics, decision, 1_000_000, tags)


def test_the_card_names_the_strongest_baseline_and_the_training_text_it_saw():
    text = card(NEW)
    assert "| PPMd order 16, given 10.0 MiB of training text (strongest baseline) | 1.3364 |" in text
    assert "| xz -9e, given 10.0 MiB of training text | 1.5119 |" in text
    assert "this model is 0.2236 bits/byte (16.7%) behind it." in text
    assert 'model = mlflow.pyfunc.load_model("models:/foundry-gpt@champion")' in text  # the champion's URI
    assert f"- version `{'a' * 32}` in `r`\n" in text
    assert "- MLflow run `run1`, git commit `unknown` (dirty: unknown)" in text  # a version whose run had no git


@pytest.mark.parametrize(
    "overlap, read",
    [
        (
            "0.5",
            "256-token windows, each repeating the last 128 tokens of the one before as context "
            "(evaluation.window_overlap 0.5), each token scored once.",
        ),
        ("0.75", "256-token windows, each repeating the last 192 tokens"),
        ("0", "non-overlapping 256-token windows."),
    ],
)
def test_the_card_says_how_the_holdout_was_read(overlap, read):
    assert f"holdout tokens, read in {read}" in card(NEW, f"evaluation.window_overlap={overlap}")


def test_a_version_recorded_before_the_strong_baselines_still_renders_its_card():
    text = card(OLD)
    assert "| xz (strongest baseline) | 1.5400 |" in text and "PPMd" not in text
    table = summary_table(OLD, None)
    assert table["model"].tolist() == ["this model", "gzip", "xz (strongest baseline)"]


def summary(metrics: HoldoutMetrics, tmp_path: Path) -> str:
    run = RunContext(run_id="r1", dir=tmp_path, home=tmp_path)
    data = DataVersion(data_version="a" * 32, remote="r")
    candidate = Candidate(checkpoint=tmp_path / "model.pt", data=data, data_dir=tmp_path, metrics=metrics, run=run)
    return pipeline_summary(
        PipelineResult.of(candidate, "gpt", Promotion(version="3", promoted=True, verdict="ok")), tmp_path
    )


def test_the_run_summary_compares_the_model_with_the_strongest_baseline(tmp_path):
    lines = summary(NEW, tmp_path).splitlines()
    assert "baselines  gzip 2.1200  xz 1.5400  xz -9e 1.5119  PPMd order 16 1.3364 bits/byte" in lines
    strongest = next(line for line in lines if line.startswith("strongest"))
    assert strongest.startswith("strongest  PPMd order 16, given 10.0 MiB of training text, 1.3364 bits/byte")


# With zpaq (#58): -m4 and -m5 given the same training text (their figures on the default data, bench/README.md).
ZPAQ = NEW.with_scores({"zpaq4_bits_per_byte": 1.2599, "zpaq5_bits_per_byte": 1.1727})


def test_the_card_and_the_summary_name_zpaq_when_it_is_the_strongest(tmp_path):
    text = card(ZPAQ)
    assert "| zpaq -m5, given 10.0 MiB of training text (strongest baseline) | 1.1727 |" in text
    assert "| zpaq -m4, given 10.0 MiB of training text | 1.2599 |" in text
    assert "| PPMd order 16, given 10.0 MiB of training text | 1.3364 |" in text  # no longer the strongest
    assert "Strongest baseline: zpaq -m5, given 10.0 MiB of training text, 1.1727 bits/byte; this model is " in text
    lines = summary(ZPAQ, tmp_path).splitlines()
    assert (
        "baselines  gzip 2.1200  xz 1.5400  xz -9e 1.5119  PPMd order 16 1.3364  zpaq -m4 1.2599  zpaq -m5 1.1727 "
        "bits/byte" in lines
    )
    strongest = next(line for line in lines if line.startswith("strongest"))
    assert strongest.startswith("strongest  zpaq -m5, given 10.0 MiB of training text, 1.1727 bits/byte")
    assert not any(line.startswith("absent") for line in lines)


def test_an_absent_zpaq_is_named_in_the_card_and_the_summary_and_never_read_as_a_score(tmp_path):
    absent = NEW.with_scores({}, absent=["zpaq4"])
    why = "zpaq -m4 not scored: the `zpaq` package is not installed or does not load (pip install zpaq==0.3.7)."
    text = card(absent)
    assert f"this model is 0.2236 bits/byte (16.7%) behind it. {why}" in text  # after PPMd, still the strongest
    assert "| zpaq" not in text
    lines = summary(absent, tmp_path).splitlines()
    assert f"absent     {why}" in lines
    assert next(line for line in lines if line.startswith("strongest")).startswith("strongest  PPMd order 16")
    assert absent.baselines() == NEW.baselines() and absent.as_mlflow() == NEW.as_mlflow()


def test_a_summary_without_baselines_has_no_strongest_line(tmp_path):
    held = HoldoutMetrics(bits_per_byte=2.5, loss=1.7, perplexity=math.exp(1.7), tokens=512)
    assert not any(line.startswith("strongest") for line in summary(held, tmp_path).splitlines())


def test_an_image_classifiers_summary_gives_its_accuracy_beside_its_baselines(tmp_path):
    from foundry.core.metrics.images import VisionMetrics

    held = VisionMetrics(
        accuracy=0.9, macro_f1=0.85, images=40, majority_accuracy=0.25, nearest_class_mean_accuracy=0.6
    )
    lines = summary(held, tmp_path).splitlines()
    assert lines[3:6] == [
        "holdout    accuracy 0.9000  macro F1 0.8500  (40 images)",
        "baselines  majority class 0.2500  nearest class mean 0.6000 accuracy",
        "MLflow run r1",
    ]


def test_an_aligned_versions_card_names_its_base_data_and_run_from_its_tags():
    from foundry.core.metrics.aligned import AlignmentMetrics
    from foundry.core.metrics.scores import AlignedScores
    from foundry.gates.decision import Decision
    from foundry.gates.inputs import AlignmentInputs
    from foundry.reports.cards import alignment_card

    config = load_config(None, ["align.method=sft"])
    manifest = DatasetManifest(
        kind="chat",
        source="chat/",
        source_digest="0" * 64,
        source_skipped={},
        stats={"train_records": 9, "holdout_records": 2},
        holdout_fraction=0.1,
        vocab_size=300,
        eot_id=0,
        dtype="uint16",
        shards=[],
        train_tokens=100,
        holdout_tokens=10,
    )
    scores = AlignedScores(response_loss=1.0, pretrain_bits_per_byte=1.5)
    metrics = AlignmentMetrics(aligned=scores, base=scores)
    inputs = AlignmentInputs(method="sft", aligned=scores, base=scores, max_regression=0.1, auto_promote=True)
    decision = Decision.of(inputs, {}, "aligned")
    git = {"git_commit": "abc123", "git_dirty": "true"}
    tags = VersionTags(run_id="run1", data_version="b" * 32, data_remote="/r", parent_model="models:/base/3", **git)
    card = alignment_card(config, manifest, metrics, decision, tags)
    assert card.startswith(f"# {config.registry.model_name}: SFT of models:/base/3\n")
    assert f"- chat records, version `{'b' * 32}` in `/r`: 9 train / 2 held out\n" in card
    assert "- MLflow run `run1`, git commit `abc123` (dirty: true)\n" in card
    assert f'load_model("models:/{config.registry.model_name}@champion")' in card
