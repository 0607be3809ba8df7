"""Logging an image classifier as a served model: its leaf (`foundry.serving.vision_pyfunc`), the model code, its
`model.pt`, signature, an input example and requirements, as one MLflow model, as `foundry.serving.package` logs a
GPT."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from foundry.serving.package import LEAF, MODEL_CODE, REQUIREMENTS

VISION_LEAF = LEAF.with_name("vision_pyfunc.py")  # the served classifier: it stays with the model's code
PILLOW = "pillow>=13,<14"  # as pyproject.toml pins it: the served model decodes images as the data stage did


def vision_requirements() -> list[str]:
    """The text model's requirements without its tokenizer, with Pillow."""
    lines = REQUIREMENTS.read_text().split()
    return [line for line in lines if not line.startswith("tokenizers")] + [PILLOW]


def vision_signature():
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ColSpec, Map, Schema

    return ModelSignature(
        # binary: the scoring server base64-decodes a JSON request's strings into bytes before `predict`
        inputs=Schema([ColSpec("binary", "image")]),
        outputs=Schema(
            [ColSpec("string", "label"), ColSpec("double", "probability"), ColSpec(Map("double"), "probabilities")]
        ),
    )


def example_image(saved: dict) -> bytes:
    """A black PNG of the size and channels the classifier was trained on: the version's input example."""
    import io

    from PIL import Image

    size, gray = int(saved["image"]["size"]), saved["model_args"].get("in_channels", 1) == 1
    out = io.BytesIO()
    Image.new("L" if gray else "RGB", (size, size)).save(out, format="PNG")
    return out.getvalue()


def vision_model_kwargs(checkpoint: Path, limits: Mapping[str, int] | None = None) -> dict:
    """What `mlflow.pyfunc.log_model` and `save_model` take for an image classifier's `model.pt`."""
    import pandas as pd
    import torch

    from models.request_limits import IMAGE_LIMITS

    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    if saved.get("modality") != "image" or "image" not in saved or "classes" not in saved:
        raise ValueError(f"{checkpoint} is not an image classifier's model.pt (modality, classes and image settings)")
    return {
        "python_model": str(VISION_LEAF),
        "code_paths": [str(MODEL_CODE)],
        "artifacts": {"checkpoint": str(checkpoint)},
        "signature": vision_signature(),
        "model_config": {key: int((limits or IMAGE_LIMITS).get(key, IMAGE_LIMITS[key])) for key in IMAGE_LIMITS},
        "input_example": pd.DataFrame({"image": [example_image(saved)]}),
        "pip_requirements": vision_requirements(),
    }


def log_vision_model(run_id: str, checkpoint: Path, limits: Mapping[str, int] | None = None) -> str:
    """Log an image classifier as a pyfunc model under the run, its code travelling with it; returns its model
    URI. `limits` bound each request (`IMAGE_LIMITS` by default), saved as the model's `model_config`."""
    import mlflow

    with mlflow.start_run(run_id=run_id):
        info = mlflow.pyfunc.log_model(name="model", **vision_model_kwargs(checkpoint, limits))
    return info.model_uri
