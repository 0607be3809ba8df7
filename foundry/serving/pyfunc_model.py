"""The registered model: prompts or chats in, generated text out, through `mlflow.pyfunc.load_model`.

A leaf: this file and the `models` package are the model's code. MLflow copies both into every
version it logs (models-from-code, `code_paths`) and runs this file to load it, so a version loads
in any environment holding its logged requirements (torch, tokenizers, pandas, mlflow), with no
Foundry checkout. Import nothing else here.

Each row holds a `prompt` (text) or `messages` (a chat: [{"role": ..., "content": ...}]). An aligned
version applies its chat template itself: messages render as the conversation, a prompt as one user
turn, and the completion is the assistant's reply. A version never aligned continues a prompt's text.
"""

import mlflow.pyfunc
import pandas as pd
from mlflow.models import set_model

from models.chat import saved_template
from models.generate import DEFAULTS, generate_replies, generate_texts
from models.gpt import gpt_from_saved, load_saved


def _present(value) -> bool:
    return value is not None and not (isinstance(value, float) and pd.isna(value))


class GPTTextGenerator(mlflow.pyfunc.PythonModel):
    """Loads the `checkpoint` (model.pt) and `tokenizer` (tokenizer.json) artifacts; generates on CPU."""

    def load_context(self, context) -> None:
        from tokenizers import Tokenizer

        saved = load_saved(context.artifacts["checkpoint"])
        self.model = gpt_from_saved(saved)
        self.template = saved_template(saved)  # None: a version never aligned
        self.tokenizer = Tokenizer.from_file(context.artifacts["tokenizer"])

    def _chat(self, row) -> list[dict] | None:
        """The row as a conversation for the template, or None when it is a prompt for a model without one."""
        messages = row.get("messages")
        if _present(messages):
            if self.template is None:
                raise ValueError("this version was never aligned: it has no chat template; send a prompt instead")
            return [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
        prompt = row.get("prompt")
        if not _present(prompt):
            raise ValueError("each row needs a prompt (text) or messages (a list of {role, content})")
        return None if self.template is None else [{"role": "user", "content": str(prompt)}]

    # Hinted as a DataFrame, which MLflow does not infer from: the explicit signature applies.
    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        params = {**DEFAULTS, **(params or {})}
        sampling = (
            int(params["max_new_tokens"]),
            float(params["temperature"]),
            int(params["top_k"]) or None,
            int(params["seed"]),
        )
        if not isinstance(model_input, pd.DataFrame):
            model_input = pd.DataFrame({"prompt": list(model_input)})
        completions = []
        for row in model_input.to_dict("records"):
            chat = self._chat(row)
            if chat is None:
                completions += generate_texts(self.model, self.tokenizer, [str(row["prompt"])], *sampling)
            else:
                completions += generate_replies(self.model, self.tokenizer, self.template, [chat], *sampling)
        return pd.DataFrame({"completion": completions})


# MLflow runs this file to load a version: it takes the model from here.
set_model(GPTTextGenerator())
