"""The registered model: prompts in, generated text out, through `mlflow.pyfunc.load_model`.

A leaf: this file and the `models` package are the model's code. MLflow copies both into every
version it logs (models-from-code, `code_paths`) and runs this file to load it, so a version loads
in any environment holding its logged requirements (torch, tokenizers, pandas, mlflow), with no
Foundry checkout. Import nothing else here.
"""

import mlflow.pyfunc
import pandas as pd
from mlflow.models import set_model

from models.generate import DEFAULTS, generate_texts
from models.gpt import load_gpt


class GPTTextGenerator(mlflow.pyfunc.PythonModel):
    """Loads the `checkpoint` (model.pt) and `tokenizer` (tokenizer.json) artifacts; generates on CPU."""

    def load_context(self, context) -> None:
        from tokenizers import Tokenizer

        self.model = load_gpt(context.artifacts["checkpoint"])
        self.tokenizer = Tokenizer.from_file(context.artifacts["tokenizer"])

    # Hinted as a DataFrame, which MLflow does not infer from: the explicit signature applies.
    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        params = {**DEFAULTS, **(params or {})}
        prompts = model_input["prompt"] if isinstance(model_input, pd.DataFrame) else model_input
        completions = generate_texts(
            self.model,
            self.tokenizer,
            list(prompts),
            int(params["max_new_tokens"]),
            float(params["temperature"]),
            int(params["top_k"]) or None,
            int(params["seed"]),
        )
        return pd.DataFrame({"completion": completions})


# MLflow runs this file to load a version: it takes the model from here.
set_model(GPTTextGenerator())
