"""The vision workload's tiny twin (configs/vision-tiny.yaml: the bundled digits, a tiny CNN, 40 steps) through the
same pipeline flow as text, under a real Prefect server: a versioned image dataset, a trained, evaluated, gated and
registered classifier that loads with `mlflow.pyfunc.load_model` and classifies an image file's bytes; then
`foundry finetune` of that classifier on a new labelled folder (shifted digits and one new class), judged by
holdout accuracy against it on the new holdout and on its own; then `foundry retrain` of it on its source grown
by a few images. The classifier is trained on 2 ranks (DDP on CPU) by the session's `vision_run` (tests/conftest.py);
tests/slow/serving/test_serving.py serves it over HTTP from a bare virtualenv."""

from __future__ import annotations

import base64
import io
import shutil

import numpy as np
import pytest
from conftest import REPO_ROOT, champion_copy, run_page


def test_the_tiny_vision_twin_registers_a_champion_with_its_baselines_and_plots(vision_run, foundry_home):
    from mlflow import MlflowClient

    _, result = vision_run
    client = MlflowClient()
    champion = client.get_model_version_by_alias("it-vision", "champion")
    assert str(champion.version) == result.model_version and result.verdict == "no champion yet"
    metrics = client.get_run(result.run_id).data.metrics
    for key in ("holdout/accuracy", "holdout/macro_f1", "holdout/majority_accuracy", "holdout/class_accuracy/7"):
        assert 0 <= metrics[key] <= 1, key
    assert metrics["holdout/nearest_class_mean_accuracy"] > 0.8  # the digits' pixels separate the classes
    logged = {a.path for a in client.list_artifacts(result.run_id, "evaluation")}
    assert {"evaluation/confusion_matrix.png", "evaluation/misclassified.png"} <= logged
    _, artifacts = run_page(result.run_id)
    assert any(row["what"] == "images kept" for row in _table(artifacts["data-stage"].data))
    # Trained on 2 ranks: rank 1 said so in its own log, and both replicas ended with the same weights and
    # BatchNorm statistics (the last validation, at step 30, was before the last steps).
    checkpoints = foundry_home / "runs" / result.run_id / "checkpoints"
    (rank1,) = checkpoints.glob("rank-logs/*/attempt_0/1/stderr.log")
    assert "rank 1 of 2: node 0, local rank 1" in rank1.read_text()
    digests = [(checkpoints / f"weights.rank{r}.sha256").read_text() for r in (0, 1)]
    assert digests[0] == digests[1] and len(digests[0].strip()) == 64


def _table(data) -> list[dict]:
    import json

    return json.loads(data) if isinstance(data, str) else data


def test_the_registered_classifier_loads_and_classifies_image_bytes(vision_run):
    import mlflow
    import pandas as pd
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    picture = Image.fromarray((digits.images[0] * 255 / 16).astype(np.uint8), mode="L")
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    model = mlflow.pyfunc.load_model("models:/it-vision@champion")
    raw = model.predict(pd.DataFrame({"image": [buffer.getvalue()]}))
    encoded = model.predict(pd.DataFrame({"image": [base64.b64encode(buffer.getvalue()).decode()]}))
    assert raw.loc[0, "label"] in [str(d) for d in range(10)]
    assert sum(raw.loc[0, "probabilities"].values()) == pytest.approx(1, abs=1e-4)
    assert raw.loc[0, "probabilities"] == encoded.loc[0, "probabilities"]


def new_digits(root, per_class: int = 30, seed: int = 0):
    """A labelled folder the base never saw: digits shifted a pixel right (new pixels, same labels) and a new
    class "x" of noisy crosses, `per_class` 8x8 gray PNGs each."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits, rng = load_digits(), np.random.default_rng(seed)
    pictures = {str(d): [] for d in range(10)}
    for image, label in zip(digits.images, digits.target):
        if len(pictures[str(label)]) < per_class:
            shifted = np.zeros_like(image)
            shifted[:, 1:] = image[:, :-1]
            pictures[str(label)].append(shifted * 255 / 16)
    diagonal = np.eye(8) + np.fliplr(np.eye(8))
    pictures["x"] = [np.clip(200 * diagonal + rng.integers(0, 60, (8, 8)), 0, 255) for _ in range(per_class)]
    for label, images in pictures.items():
        (root / label).mkdir(parents=True)
        for i, pixels in enumerate(images):
            Image.fromarray(pixels.astype(np.uint8), mode="L").save(root / label / f"{i}.png")
    return root


def test_a_fine_tune_on_a_new_folder_keeps_the_base_classes_adds_one_and_is_judged_by_accuracy(
    vision_run, tmp_path, foundry_home
):
    from mlflow import MlflowClient

    from flows.finetune import finetune
    from foundry.config import load_config
    from foundry.registry import versions
    from foundry.vision.evaluate import load_saved

    _, base = vision_run
    steps = [
        "train.max_steps=40",
        "train.batch_size=32",  # the rows this was written with: 16 (params.yaml's now) learn too little in 40 steps
        "train.warmup_steps=2",
        "finetune.train.learning_rate=0.03",
        "train.val_every_n_steps=20",
    ]
    # As `foundry finetune models:/it-vision@champion --set data.source=DIR` loads its config: text by default.
    config = load_config(
        None, [f"data.source={new_digits(tmp_path / 'digits-x')}", "data.holdout_fraction=0.2", *steps]
    )
    result = finetune(model="models:/it-vision@champion", config=config)
    assert result.parent == base.model_uri and result.model_name == "it-vision-digits-x"

    saved = load_saved(versions.download(versions.resolve(result.model_uri), foundry_home) / "model.pt")
    assert saved["classes"] == [*(str(d) for d in range(10)), "x"]  # the base's indices, the new class last
    assert saved["image"] == {"size": 8, "channels": "gray", "mode": "resize"}  # the base's input
    tags = MlflowClient().get_model_version(result.model_name, result.model_version).tags
    base_tags = MlflowClient().get_model_version("it-vision", base.model_version).tags
    assert tags["parent_model"] == base.model_uri and tags["gate.champion_version"] == base.model_version
    assert tags["gate.old_holdout_version"] == base_tags["data_version"]  # both scored on the base's own holdout
    challenger, base_accuracy = float(tags["gate.challenger_accuracy"]), float(tags["gate.champion_accuracy"])
    assert challenger == pytest.approx(result.metrics.accuracy, abs=1e-6)
    assert set(result.metrics.per_class_accuracy) == {*(str(d) for d in range(10)), "x"}
    # The new head row learned its class (the base, without that row, misses every one of them).
    assert result.metrics.per_class_accuracy["x"] >= 0.5, result.metrics.per_class_accuracy
    # its data was built on the base's: no image of the base's holdout, or a near copy, is trained on
    assert MlflowClient().get_run(result.run_id).data.tags["parent_data_version"] == base_tags["data_version"]
    assert tags["gate.passed"] == str(challenger > base_accuracy and "forgets" not in tags["gate.verdict"]).lower()


def test_a_retrain_on_its_grown_source_builds_on_its_data_starts_from_it_and_is_judged_by_accuracy(
    vision_run, tmp_path, foundry_home
):
    """`foundry retrain` of the classifier (a copy under a name of its own: `it-vision` stays as it is) after a
    few images joined its source: its data version's ledger keeps every old image's split and the class order,
    the weights start from the champion's, and the gate reads holdout accuracy."""
    import pandas as pd
    from mlflow import MlflowClient

    from flows.retrain import retrain
    from foundry.config import load_config
    from foundry.registry import versions
    from foundry.vision.builtin import materialise
    from foundry.vision.evaluate import load_saved

    _, base = vision_run
    champion = champion_copy(base, "it-vision-retrain")
    digits = materialise("sklearn://digits", foundry_home / "sources")  # what `sklearn://digits` reads
    source = shutil.copytree(digits, tmp_path / "digits", ignore=shutil.ignore_patterns(".complete"))
    added = new_digits(tmp_path / "new", per_class=3)
    for label in (str(d) for d in range(10)):  # new pictures of the old classes ("x" is the fine-tune's)
        for png in (added / label).iterdir():
            shutil.copy(png, source / label / f"new-{png.name}")
    overrides = ["registry.model_name=it-vision-retrain", f"data.source={source}"]
    overrides += ["retrain.train.max_steps=40", "retrain.train.warmup_steps=2"]  # the twin's steps, not 200
    result = retrain(config=load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", overrides))

    client = MlflowClient()
    base_tags = client.get_model_version("it-vision", base.model_version).tags
    run = client.get_run(result.run_id).data
    assert result.parent == f"models:/it-vision-retrain/{champion}"
    assert run.metrics["retrain/new_files"] == 30
    assert run.metrics["data/new_images"] == 29  # one is a near copy of a digit already there: dropped
    assert run.metrics["data/ledger_images_present"] > 1000  # the champion's images, split as before
    assert run.params["train.init_from"].endswith(f"it-vision-retrain-v{champion}/artifacts/model.pt")  # its weights
    assert run.params["train.max_steps"] == "40"
    old, new = (
        pd.read_csv(foundry_home / "hydrated" / version / "images.csv")
        for version in (base_tags["data_version"], result.data_version)
    )
    held, held_before = (set(frame[frame.split == "holdout"].sha256) for frame in (new, old))
    assert held_before <= held  # sticky: the champion's holdout is held out still, and nothing it trained on joins
    assert set(new[new.sha256.isin(held - held_before)].source.str.rsplit("/", n=1).str[1].str[:4]) == {"new-"}
    saved = load_saved(versions.download(versions.resolve(result.model_uri), foundry_home) / "model.pt")
    assert saved["classes"] == [str(d) for d in range(10)]
    tags = client.get_model_version("it-vision-retrain", result.model_version).tags
    assert tags["gate.champion_version"] == champion and tags["gate.old_holdout_version"] == base_tags["data_version"]
    challenger, held = float(tags["gate.challenger_accuracy"]), float(tags["gate.champion_accuracy"])
    assert challenger == pytest.approx(result.metrics.accuracy, abs=1e-6)
    assert tags["gate.passed"] == str(challenger > held and "forgets" not in tags["gate.verdict"]).lower()
