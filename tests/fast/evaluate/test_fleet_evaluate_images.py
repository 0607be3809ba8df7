"""`foundry evaluate` on images (foundry/vision/scoring.py) against the session's embedded MLflow registry:
classifiers built by hand (`brightness_classifier`: one right on every image by construction, one of random
weights) registered as the pipeline registers them, without training, scored on a tiny folder of labelled images."""

from __future__ import annotations

import pytest
from conftest import REPO_ROOT
from helpers_evaluate import random_model_files, register_files
from helpers_hostile import files_under
from helpers_images import BRIGHTNESS, brightness_classifier, gray_png
from helpers_tokenizers import plain_tokenizer

from foundry.config import load_config
from foundry.evaluate import report
from foundry.evaluate.scores import resolve_models, source_config
from foundry.evaluate.steps import evaluate_all
from foundry.runtime import tracking

pytestmark = pytest.mark.usefixtures("home")

PER_CLASS = {"dark": 14, "mid": 10, "bright": 6}  # the majority class is dark


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Class-per-subfolder 8x8 gray PNGs, listed as `PER_CLASS` says; the folder's labels sort as bright, dark,
    mid, which is not the classifiers' class order (dark, mid, bright)."""
    root = tmp_path_factory.mktemp("evaluate-images") / "gray"
    seed = 0
    for label, n in PER_CLASS.items():
        (root / label).mkdir(parents=True)
        for i in range(n):
            seed += 1
            gray_png(root / label / f"{i}.png", BRIGHTNESS[label], seed)
    return root


def vision(*overrides: str):
    return load_config(
        REPO_ROOT / "configs" / "vision-tiny.yaml",
        ["data.holdout_fraction=0.4", "evaluation.batch_size=8", "image.near_dup_distance=-1", *overrides],
    )


def model_pt(root, name: str):
    """Where a classifier's file goes: `model.pt`, the name the registry keeps it under, as training writes it."""
    (root / name).mkdir()
    return root / name / "model.pt"


def register_classifier(config, name: str, model_pt) -> str:
    """A classifier's version logged and published as the pipeline does (its vision pyfunc), champion."""
    from foundry.registry import versions
    from foundry.vision.package import log_vision_model

    run_id = tracking.start_pipeline_run(config, run_name=f"seed-{name}")
    uri = log_vision_model(run_id, model_pt)
    return f"models:/{name}/{versions.publish(uri, name, run_id, {}, True, 'seeded for the test').version}"


def test_classifiers_on_a_folder_scored_beside_the_baselines_linked_to_each_version(folder, home, tmp_path):
    config = vision()
    perfect = register_classifier(config, "img-perfect", brightness_classifier(model_pt(tmp_path, "perfect")))
    noisy = register_classifier(
        config, "img-random", brightness_classifier(model_pt(tmp_path, "random"), perfect=False)
    )
    before = files_under(folder)
    config = source_config(config, str(folder))
    with tracking.pipeline_run(config, "evaluate images", {"foundry.stage": "evaluate"}) as run:
        evaluation = evaluate_all(resolve_models([noisy, "models:/img-perfect@champion"]), str(folder), config, run)

    second = evaluation.models[1]
    assert (evaluation.data.kind, second.model.model) == ("image", perfect)
    # Right on every holdout image although the data indexes its classes otherwise: read by label.
    assert (second.vision.accuracy, second.vision.macro_f1) == (1.0, 1.0)
    assert set(second.vision.per_class_accuracy.values()) == {1.0}
    holdout = evaluation.holdout_records
    assert second.vision.images == holdout and 0 < holdout < sum(PER_CLASS.values())
    assert evaluation.baselines.scores["nearest_class_mean"] == 1.0  # three well-apart gray levels
    assert 0 < evaluation.baselines.scores["majority"] < 1
    assert second.vision.majority_accuracy == evaluation.baselines.scores["majority"]

    text = report.comparison(evaluation)
    lines = text.splitlines()
    header = lines.index("| model | accuracy | macro_f1 | loss | images |")
    assert lines[header + 2].startswith(f"| {perfect} (models:/img-perfect@champion) | 1.0000 | 1.0000 |")
    assert "| baseline: majority class |" in text and "| baseline: nearest class mean | 1.0000 |" in text
    assert f"| class | {noisy} | {perfect} (models:/img-perfect@champion) |" in text
    assert report.outcome(evaluation) == f"best: {perfect} at accuracy 1.0000"

    # No ledger touched: nothing versioned or hydrated, the staging folder gone, the source as it was.
    assert not (home / "workspace").exists() and not (home / "hydrated").exists()
    assert not (run.dir / "prepared").exists() and files_under(folder) == before

    c = tracking.client()
    child = c.get_run(second.run_id)
    assert child.data.tags["foundry.evaluates"] == perfect and "foundry.tokenizer" not in child.data.tags
    assert child.data.metrics["eval/baseline/majority_accuracy"] == evaluation.baselines.scores["majority"]
    linked = {m.key: m for m in c.get_logged_model(second.model.model_id).metrics}
    assert linked["eval/accuracy"].value == 1.0 and linked["eval/accuracy"].dataset_name == evaluation.data.name
    assert linked["eval/class_accuracy/dark"].value == 1.0
    logged = {a.path for a in c.list_artifacts(evaluation.run_id, "evaluation")}
    assert logged == {"evaluation/comparison.md", "evaluation/evaluation.png"}


def test_a_language_model_on_images_is_refused_before_any_model_is_scored(folder, home, tmp_path):
    text_config = load_config(REPO_ROOT / "configs" / "tiny.yaml")
    language = register_files(text_config, "img-gpt", random_model_files(text_config, plain_tokenizer(), home / "g", 1))
    classifier = register_classifier(vision(), "img-one", brightness_classifier(model_pt(tmp_path, "one")))
    config = source_config(vision(), str(folder))
    with tracking.pipeline_run(config, "evaluate mixed", {"foundry.stage": "evaluate"}) as run:
        with pytest.raises(ValueError, match=f"{language}: language models, and .* holds image data"):
            evaluate_all(resolve_models([classifier, language]), str(folder), config, run)
    c = tracking.client()
    experiment = c.get_run(run.run_id).info.experiment_id
    assert c.search_runs([experiment], f"tags.`foundry.evaluates` = '{classifier}'") == []  # none scored


def test_a_classifier_that_never_saw_a_holdout_label_is_refused(folder, home, tmp_path):
    import shutil

    extended = tmp_path / "extended"
    shutil.copytree(folder, extended)
    (extended / "white").mkdir()
    for i in range(12):
        gray_png(extended / "white" / f"{i}.png", 200, 1000 + i)
    classifier = register_classifier(vision(), "img-three", brightness_classifier(model_pt(tmp_path, "three")))
    config = source_config(vision(), str(extended))
    with tracking.pipeline_run(config, "evaluate unknown label", {"foundry.stage": "evaluate"}) as run:
        with pytest.raises(ValueError, match=r"was not trained on the label\(s\) \['white'\]"):
            evaluate_all(resolve_models([classifier]), str(extended), config, run)
