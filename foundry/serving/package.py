"""Logging the served model: its code, weights, tokenizer, signature and requirements, as one MLflow model; an
image classifier the same way, with its own leaf (`vision_pyfunc.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import models
from models.request_limits import CHAT_COMPLETION_FIELDS, DEFAULTS, LIMITS

LEAF = Path(__file__).with_name("pyfunc_model.py")
MODEL_CODE = Path(models.__file__).parent  # the package folder travels with the model as its code
# What loading and serving a version needs, and nothing more: a fresh environment with these loads it.
# A file, so that `make test` can gather their wheels for the test that loads a version offline.
REQUIREMENTS = Path(__file__).with_name("requirements.txt")


def signature(limits: Mapping[str, int] = LIMITS):
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, Object, ParamSchema, ParamSpec, Property, Schema

    message = Object([Property("role", "string"), Property("content", "string")])
    return ModelSignature(
        # Each row one or the other: text to continue, or a chat the model's template renders (aligned versions).
        # Then the chat-completions fields, as MLflow's ChatModel takes them: the scoring server hands a body of
        # `messages` (not wrapped in dataframe_records) over as one row, with its other fields as columns.
        inputs=Schema(
            [ColSpec("string", "prompt", required=False), ColSpec(Array(message), "messages", required=False)]
            + [ColSpec(kind, name, required=False) for name, kind in CHAT_COMPLETION_FIELDS.items()]
        ),
        outputs=Schema([ColSpec("string", "completion")]),
        params=ParamSchema(
            [
                ParamSpec("max_new_tokens", "long", min(DEFAULTS["max_new_tokens"], limits["max_new_tokens"])),
                ParamSpec("temperature", "double", DEFAULTS["temperature"]),
                ParamSpec("top_k", "long", DEFAULTS["top_k"]),
                ParamSpec("seed", "long", DEFAULTS["seed"]),
            ]
        ),
    )


def log_model(run_id: str, checkpoint: Path, tokenizer: Path, limits: Mapping[str, int] | None = None) -> str:
    """Log the pyfunc model under the run, its code travelling with it; returns its model URI. `limits` bound
    each request it serves (the config's `serving` section; `LIMITS` when not given): saved as the model's
    `model_config`, which it reads when it loads."""
    import mlflow
    import pandas as pd

    limits = {key: int((limits or LIMITS)[key]) for key in LIMITS}

    with mlflow.start_run(run_id=run_id):
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=str(LEAF),
            code_paths=[str(MODEL_CODE)],
            artifacts={"checkpoint": str(checkpoint), "tokenizer": str(tokenizer)},
            signature=signature(limits),
            model_config=limits,
            input_example=pd.DataFrame({"prompt": ["def main():"]}),
            pip_requirements=str(REQUIREMENTS),  # inferring them costs ~15 s
        )
    return info.model_uri


# --- image classifiers ----------------------------------------------------------------------------------

VISION_LEAF = Path(__file__).with_name("vision_pyfunc.py")
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
