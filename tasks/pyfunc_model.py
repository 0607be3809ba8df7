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
        import torch

        from tasks.shards import EOT

        params = {**PARAMS, **(params or {})}
        prompts = model_input["prompt"] if isinstance(model_input, pd.DataFrame) else model_input
        eot = self.tokenizer.token_to_id(EOT)
        completions = []
        for prompt in prompts:
            ids = self.tokenizer.encode(str(prompt)).ids or [eot]
            generator = torch.Generator().manual_seed(int(params["seed"]))
            out = self.model.generate(
                torch.tensor([ids]), int(params["max_new_tokens"]), float(params["temperature"]),
                int(params["top_k"]) or None, generator=generator, stop_token=eot,
            )
            new_ids = [i for i in out[0, len(ids):].tolist() if i != eot]
            completions.append(self.tokenizer.decode(new_ids))
        return pd.DataFrame({"completion": completions})
