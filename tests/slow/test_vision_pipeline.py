"""The vision workload's tiny twin (configs/vision-tiny.yaml: the bundled digits, a tiny CNN, 20 steps) through the
same pipeline flow as text, under a real Prefect server: a versioned image dataset, a trained, evaluated, gated and
registered classifier that loads with `mlflow.pyfunc.load_model` and classifies an image file's bytes."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from conftest import REPO_ROOT, run_page


@pytest.fixture(scope="module")
def vision_run(prefect_harness):
    from flows.train_pipeline import train_pipeline
    from foundry.config import load_config

    config = load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", ["registry.model_name=it-vision"])
    return config, train_pipeline(config=config)


def test_the_tiny_vision_twin_registers_a_champion_with_its_baselines_and_plots(vision_run):
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
