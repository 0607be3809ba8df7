"""The registered model's MLflow face: prompts in, generated text out, via `mlflow.pyfunc.load_model`."""

from __future__ import annotations

import mlflow.pyfunc
import pandas as pd

PARAMS = {"max_new_tokens": 64, "temperature": 0.8, "top_k": 40, "seed": 0}


def signature():
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema

    return ModelSignature(
        inputs=Schema([ColSpec("string", "prompt")]),
        outputs=Schema([ColSpec("string", "completion")]),
        params=ParamSchema([
            ParamSpec("max_new_tokens", "long", PARAMS["max_new_tokens"]),
            ParamSpec("temperature", "double", PARAMS["temperature"]),
            ParamSpec("top_k", "long", PARAMS["top_k"]),
            ParamSpec("seed", "long", PARAMS["seed"]),
        ]),
    )


class GPTTextGenerator(mlflow.pyfunc.PythonModel):
    """Loads `checkpoint` (model.pt) and `tokenizer` (tokenizer.json) artifacts; generates on CPU."""

    def load_context(self, context) -> None:
        from tokenizers import Tokenizer

        from tasks.train import load_model

        self.model = load_model(context.artifacts["checkpoint"])
        self.tokenizer = Tokenizer.from_file(context.artifacts["tokenizer"])

    def predict(self, context, model_input, params=None) -> pd.DataFrame:
        from tasks.generate import generate_texts

        params = {**PARAMS, **(params or {})}
        prompts = model_input["prompt"] if isinstance(model_input, pd.DataFrame) else model_input
        completions = generate_texts(
            self.model, self.tokenizer, list(prompts), int(params["max_new_tokens"]), float(params["temperature"]),
            int(params["top_k"]) or None, int(params["seed"]),
        )
        return pd.DataFrame({"completion": completions})
