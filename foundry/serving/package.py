"""Logging the served model: its code, weights, tokenizer, signature and requirements, as one MLflow model (an
image classifier's is `foundry.vision.package`'s, with its own leaf, `vision_pyfunc.py`)."""

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

    limits = {key: int((limits or LIMITS).get(key, LIMITS[key])) for key in LIMITS}

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
