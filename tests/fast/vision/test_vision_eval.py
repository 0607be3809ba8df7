"""Evaluating an image classifier (`foundry.core.metrics.images`, `foundry.vision.evaluate`): exact figures on
hand-made arrays, then on a tiny generated image dataset with a classifier right by construction and a
random-weight one."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_images import brightness_classifier, image_shards
from PIL import Image

from foundry.core import workload
from foundry.core.metrics.images import (
    ClassMeans,
    VisionMetrics,
    accuracy_of,
    confusion,
    macro_f1,
    majority_accuracy,
    per_class_accuracy,
)
from foundry.core.workload import for_data
from foundry.evaluate.scores import ModelRef
from foundry.pretrain.scoring import is_language_model
from foundry.vision.evaluate import accuracy_on, evaluate_images
from foundry.vision.scoring import is_classifier

COUNTS = {"train": {"dark": 6, "mid": 3, "bright": 3}, "holdout": {"dark": 4, "mid": 2, "bright": 2}}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return image_shards(tmp_path_factory.mktemp("images"), COUNTS)


def test_a_perfect_prediction_scores_one_everywhere():
    matrix = confusion(np.array([0, 1, 2, 2]), np.array([0, 1, 2, 2]), 3)
    assert (accuracy_of(matrix), macro_f1(matrix)) == (1.0, 1.0)
    assert per_class_accuracy(matrix, ["a", "b", "c"]) == {"a": 1.0, "b": 1.0, "c": 1.0}


def test_macro_f1_weighs_each_class_alike():
    # class 0: tp 2, fp 1, fn 0 -> F1 0.8; class 1: tp 0, fn 1 -> 0; class 2 absent from targets and predictions
    matrix = confusion(np.array([0, 0, 1]), np.array([0, 0, 0]), 3)
    assert matrix.tolist() == [[2, 0, 0], [1, 0, 0], [0, 0, 0]]
    assert macro_f1(matrix) == pytest.approx(0.4)
    assert accuracy_of(matrix) == pytest.approx(2 / 3)
    assert per_class_accuracy(matrix, ["a", "b", "c"]) == {"a": 1.0, "b": 0.0}


def test_the_majority_baseline_answers_the_largest_training_class():
    targets = np.array([0, 0, 0, 1, 2, 2, 2, 2])
    assert majority_accuracy({"a": 5, "b": 1, "c": 2}, targets, ["a", "b", "c"]) == 3 / 8
    assert majority_accuracy({"a": 1, "b": 1, "c": 9}, targets, ["a", "b", "c"]) == 4 / 8


def test_nearest_class_mean_picks_the_closest_mean_and_never_an_unseen_class():
    means = ClassMeans(3)
    means.add(np.array([[[0, 0]], [[2, 2]], [[10, 10]]]), np.array([0, 0, 1]))  # means (1, 1) and (10, 10)
    assert means.predict(np.array([[[0, 1]], [[9, 12]], [[6, 6]], [[-100, -100]]])).tolist() == [0, 1, 1, 0]


def test_metrics_round_trip_through_their_mlflow_keys():
    m = VisionMetrics(
        accuracy=0.75, macro_f1=0.5, loss=0.9, images=8, majority_accuracy=0.5, per_class_accuracy={"a/b c": 1.0}
    )
    flat = m.as_mlflow()
    assert flat["holdout/accuracy"] == 0.75 and flat["holdout/class_accuracy/a/b c"] == 1.0
    assert VisionMetrics.from_mlflow({k: str(v) for k, v in flat.items()}) == m
    assert m.strongest_baseline() == ("majority", 0.5)


def test_the_strongest_image_baseline_is_the_most_accurate_and_per_class_accuracy_has_no_single_key():
    m = VisionMetrics(accuracy=0.9, majority_accuracy=0.4, nearest_class_mean_accuracy=0.6)
    assert m.strongest_baseline() == ("nearest_class_mean", 0.6)  # text's is the fewest bits per byte
    with pytest.raises(KeyError, match="per_class_accuracy"):
        VisionMetrics.key("per_class_accuracy")
    with pytest.raises(KeyError, match="holdout/accuracy"):
        VisionMetrics.from_mlflow({"holdout/loss": 0.3})


def test_a_label_mlflow_cannot_key_is_written_with_underscores():
    assert VisionMetrics.class_key("ça:va?") == "holdout/class_accuracy/ça_va_"


def test_a_perfect_classifier_on_the_holdout(shards, tmp_path, tiny_config):
    checkpoint = brightness_classifier(tmp_path / "model.pt")
    m = evaluate_images(tiny_config, checkpoint, shards, plots_dir=tmp_path / "plots")
    assert (m.accuracy, m.macro_f1, m.images) == (1.0, 1.0, 8)
    assert m.per_class_accuracy == {"dark": 1.0, "mid": 1.0, "bright": 1.0}
    assert m.majority_accuracy == 0.5  # "dark" has most training images and half the holdout's
    assert m.nearest_class_mean_accuracy == 1.0
    assert 0 < m.loss < 1.1  # softmax of logits a level apart: right, not certain
    assert accuracy_on(checkpoint, shards, batch_size=3) == 1.0


def test_a_random_classifier_is_scored_consistently_and_its_mistakes_are_drawn(shards, tmp_path, tiny_config):
    checkpoint = brightness_classifier(tmp_path / "model.pt", perfect=False, seed=3)
    m = evaluate_images(tiny_config, checkpoint, shards, plots_dir=tmp_path / "plots")
    shares = {label: n / 8 for label, n in COUNTS["holdout"].items()}
    assert m.accuracy == pytest.approx(sum(shares[k] * v for k, v in m.per_class_accuracy.items()))
    assert m.accuracy < 1.0  # a random cnn gets some of these wrong (seed 3: fixed)
    assert m.majority_accuracy == 0.5 and m.nearest_class_mean_accuracy == 1.0
    for name in ("confusion_matrix.png", "misclassified.png"):
        with Image.open(tmp_path / "plots" / name) as image:
            assert image.format == "PNG" and image.width > 100
    # the plot the image workload names as showing its data (a purge deletes it) is the grid drawn here
    assert set(workload.named("image").data_plots) == {"misclassified.png"}


def test_an_image_dataset_and_checkpoint_are_told_from_text_ones(shards, tmp_path, tiny_dataset):
    """As the code asks: a data folder's workload (`for_data`), and a model's files in `foundry evaluate`."""
    checkpoint = brightness_classifier(tmp_path / "model.pt")
    assert for_data(shards).name == "image" and for_data(tiny_dataset).name == "text"
    ref = ModelRef(asked="classifier", model="models:/classifier/1", model_id=None, artifacts=checkpoint.parent)
    assert is_classifier(ref) and not is_language_model(ref)


def test_a_model_of_other_classes_is_refused(shards, tmp_path, tiny_config):
    import torch

    checkpoint = brightness_classifier(tmp_path / "model.pt")
    saved = torch.load(checkpoint, weights_only=True)
    torch.save(saved | {"classes": ["mid", "dark", "bright"]}, checkpoint)
    with pytest.raises(ValueError, match="do not index"):
        evaluate_images(tiny_config, checkpoint, shards)


def test_the_model_card_shows_accuracy_beside_the_baselines_and_the_champion(tmp_path):
    import torch

    from foundry.core.version_tags import VersionTags
    from foundry.gates import pretrain
    from foundry.vision.card import vision_card
    from foundry.vision.gate_inputs import ImageInputs, OldImageHoldout

    m = VisionMetrics(
        accuracy=0.95, macro_f1=0.94, loss=0.2, images=8, majority_accuracy=0.5, per_class_accuracy={"dark": 1.0}
    )
    old = OldImageHoldout(data_version="v0", challenger_accuracy=0.9, champion_accuracy=0.91, max_regression=0.02)
    inputs = ImageInputs(
        challenger_accuracy=0.95,
        min_improvement=0.0,
        auto_promote=True,
        champion_version="2",
        champion_accuracy=0.9,
        old_holdout=old,
    )
    saved = torch.load(brightness_classifier(tmp_path / "model.pt"), weights_only=True)
    git = {"git_commit": "abc123", "git_dirty": "false"}
    tags = VersionTags(run_id="run1", data_version="a" * 32, data_remote="/tmp/remote", **git)
    card = vision_card("digits", saved, m, pretrain.decide(inputs), 1234, tags)
    assert "**Verdict:** 0.9500 beats champion's 0.9000 accuracy" in card
    assert "| majority class (strongest baseline) | 0.5000 |" in card and "| current champion | 0.9000 |" in card
    assert "worse by 0.0100, within the 0.02 allowed" in card
    assert 'model = mlflow.pyfunc.load_model("models:/digits@champion")' in card
    assert f"- version `{'a' * 32}` in `/tmp/remote`; 3 classes" in card
    assert "- MLflow run `run1`, git commit `abc123` (dirty: false)" in card
