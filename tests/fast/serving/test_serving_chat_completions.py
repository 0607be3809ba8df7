"""An aligned version answers the chat-completions (OpenAI) request shape in that shape, through what MLflow's
scoring server runs for `POST /invocations` (`mlflow.pyfunc.scoring_server.invocations`, asked in-process): a body
of `messages` with `max_tokens`, `temperature`, `model` is one chat; the answer a `chat.completion` whose finish
reason and token counts are those of the generation. Foundry's rows (`dataframe_records` of `prompt` or
`messages`) are answered as before, all rows in one generation call. Tiny random-weight models, no training.
tests/slow/serving/test_serving.py asks a served aligned version the same over HTTP."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from helpers_registry import new_run
from helpers_serving import tiny_served_files
from tokenizers import Tokenizer

from foundry.config import load_config
from foundry.serving.package import log_model
from models.chat import ChatTemplate
from models.chat_completion import complete_chat
from models.generate import Sampling, generate_replies
from models.gpt import gpt_from_saved, load_saved

LIMITED = {"max_new_tokens": 8, "max_prompt_chars": 200, "max_rows": 3}
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "river stone"}]
GREEDY = {"temperature": 0, "top_k": 0}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_served_files(tmp_path_factory.mktemp("chat-completions"))


@pytest.fixture(scope="module")
def aligned_uri(files) -> str:
    """The aligned tiny model logged with low limits."""
    config = load_config(None, [f"serving.{key}={value}" for key, value in LIMITED.items()])
    return log_model(new_run("chat-completions"), *files[:2], config.serving.model_dump())


@pytest.fixture(scope="module")
def served(aligned_uri):
    import mlflow

    return mlflow.pyfunc.load_model(aligned_uri)


def ask(model, body: dict) -> tuple[int, dict]:
    """What the scoring server answers a JSON body POSTed to /invocations: MLflow's `invocations`, and an
    `MlflowException` as the status and JSON its app sends for one."""
    from mlflow.exceptions import MlflowException
    from mlflow.pyfunc.scoring_server import invocations

    try:
        result = invocations(json.dumps(body), "application/json", model, model.metadata.get_input_schema())
    except MlflowException as error:
        return error.get_http_status_code(), json.loads(error.serialize_as_json())
    return result.status, json.loads(result.response)


def test_a_chat_completions_body_is_answered_in_that_shape(served, files):
    body = {"model": "foundry-chat", "messages": CHAT, "max_tokens": 6, **GREEDY}
    status, answer = ask(served, body)
    _, rows = ask(served, {"dataframe_records": [{"messages": CHAT}], "params": {"max_new_tokens": 6, **GREEDY}})
    tokenizer = Tokenizer.from_file(str(files[1]))
    [choice] = answer["choices"]
    usage = answer["usage"]
    assert status == 200 and answer["object"] == "chat.completion" and answer["id"].startswith("chatcmpl-")
    assert answer["model"] == "foundry-chat" and isinstance(answer["created"], int)
    assert choice["index"] == 0 and choice["message"] == {
        "role": "assistant",
        "content": rows["predictions"][0]["completion"],
    }
    assert usage["prompt_tokens"] == len(ChatTemplate().encode_prompt(tokenizer, CHAT))
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert (choice["finish_reason"], usage["completion_tokens"]) == ("length", 6)  # random weights never close a turn


@pytest.mark.parametrize(
    "rows",
    [
        [{"prompt": "river"}, {"prompt": "stone light"}, {"prompt": "add two"}],
        [{"messages": CHAT}, {"messages": CHAT[1:]}],
    ],
)
def test_rows_are_answered_as_before_all_at_once_as_one_by_one(served, rows):
    params = {"max_new_tokens": 5, **GREEDY}
    status, together = ask(served, {"dataframe_records": rows, "params": params})
    alone = [ask(served, {"dataframe_records": [row], "params": params})[1]["predictions"][0] for row in rows]
    assert status == 200 and list(together) == ["predictions"], together
    assert together["predictions"] == alone and all(set(row) == {"completion"} for row in alone)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"messages": CHAT, "max_tokens": -5}, "max_tokens = -5: must be between 1 and 8"),
        ({"messages": CHAT, "max_tokens": 9}, "max_tokens = 9: must be between 1 and 8"),
        ({"messages": CHAT, "max_completion_tokens": 0}, "max_completion_tokens = 0: must be between 1 and 8"),
        ({"messages": CHAT, "max_tokens": 4, "max_completion_tokens": 5}, "max_tokens = 4 and max_completion_tokens"),
        ({"messages": CHAT, "max_tokens": 4, "temperature": -1}, "params.temperature = -1"),
        ({"messages": CHAT, "n": 2}, "n = 2: this model answers one choice per request"),
        ({"messages": CHAT, "stream": True}, "stream = True: answers are not streamed"),
        ({"messages": [{"role": "system", "content": "x"}], "max_tokens": 4}, "row 0: messages hold no user turn"),
        ({"messages": [{"role": "user", "content": "x" * 201}], "model": "m"}, "row 0: messages holds 201 characters"),
        ({"prompt": "river", "max_tokens": 4}, "max_tokens: a chat-completions request is one chat"),
        (
            {"dataframe_records": [{"messages": CHAT, "model": "m"}] * 2},
            "model: a chat-completions request is one chat",
        ),
    ],
)
def test_a_bad_chat_completions_request_gets_400_naming_the_field(served, body, named):
    status, answer = ask(served, body)
    assert status == 400 and answer["error_code"] == "INVALID_PARAMETER_VALUE", answer
    assert named in answer["message"], answer["message"]


def test_the_scoring_server_has_no_openai_route_only_invocations(served, monkeypatch):
    """An OpenAI client posts to `{base_url}/chat/completions`: the app `mlflow models serve` runs has no such
    route (tests/slow/serving/test_serving.py gets its 404 over HTTP)."""
    from mlflow.environment_variables import _MLFLOW_IS_IN_SERVING_ENVIRONMENT
    from mlflow.pyfunc import scoring_server

    monkeypatch.setenv(_MLFLOW_IS_IN_SERVING_ENVIRONMENT.name, "false")  # the app sets it; put back after
    posted = {route.path for route in scoring_server.init(served).routes if "POST" in getattr(route, "methods", ())}
    assert posted == {"/invocations"}


def test_a_version_never_aligned_refuses_a_chat_completions_request(files):
    import mlflow

    base = mlflow.pyfunc.load_model(log_model(new_run("chat-completions-base"), files[2], files[1]))
    status, answer = ask(base, {"messages": CHAT, "max_tokens": 4})
    assert status == 400 and "messages: this version was never aligned" in answer["message"]


def _tiny(files, end_logit: float | None = None):
    """The tiny aligned model; with `end_logit`, its last layer norm made constant so that every position scores
    the end marker `end_logit` and every other token at most ~0.1: it always (> 0) or never (< 0) ends at once."""
    tokenizer = Tokenizer.from_file(str(files[1]))
    model = gpt_from_saved(load_saved(files[0]))
    if end_logit is not None:
        with torch.no_grad():
            model.ln_f.weight.zero_()
            model.ln_f.bias.zero_()
            model.ln_f.bias[0] = 1.0
            model.wte.weight[tokenizer.token_to_id(ChatTemplate().end), 0] = end_logit
    return model, tokenizer


def test_the_finish_reason_is_the_generations(files):
    template = ChatTemplate()
    stops = complete_chat(*_tiny(files, 100.0), template, CHAT, Sampling(8, 0.0, None, 0))
    runs_on = complete_chat(*_tiny(files, -100.0), template, CHAT, Sampling(8, 0.0, None, 0))
    assert (stops.finish_reason, stops.completion_tokens, stops.text) == ("stop", 1, "")
    assert (runs_on.finish_reason, runs_on.completion_tokens) == ("length", 8)


def test_a_chat_completion_says_what_generate_replies_says(files):
    model, tokenizer = _tiny(files)
    reply = complete_chat(model, tokenizer, ChatTemplate(), CHAT, Sampling(6, 0.7, 5, 3))
    assert reply.text == generate_replies(model, tokenizer, ChatTemplate(), [CHAT], Sampling(6, 0.7, 5, 3))[0]
    assert reply.prompt_tokens == len(ChatTemplate().encode_prompt(tokenizer, CHAT))


def test_predict_takes_the_same_body_as_a_dict(served):
    """`load_model(...).predict` of the body (temperature as a param, as the server splits it) gives the same shape."""
    answer = served.predict({"messages": CHAT, "max_tokens": 3}, params=GREEDY)
    assert answer["object"] == "chat.completion" and answer["usage"]["completion_tokens"] == 3
    assert isinstance(pd.DataFrame(answer["choices"]).loc[0, "message"]["content"], str)
