"""`foundry serve-model`'s app (foundry/serving/http.py), asked in-process through FastAPI's TestClient: MLflow's
scoring routes as `mlflow models serve` has them, and OpenAI's `/v1/chat/completions` answering what `/invocations`
answers for the same body, its refusals in OpenAI's error shape. Tiny random-weight model, no training.
tests/slow/serving/test_serving.py points the OpenAI SDK at a real `foundry serve-model` process."""

from __future__ import annotations

import pytest
from helpers_registry import new_run
from helpers_serving import tiny_served_files

from foundry.cli import main
from foundry.config import load_config
from foundry.serving.http import build_app, check_host
from foundry.serving.package import log_model

LIMITED = {"max_new_tokens": 8, "max_prompt_chars": 200, "max_rows": 3}
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "river stone"}]
BODY = {"model": "tiny-chat", "messages": CHAT, "max_tokens": 5, "temperature": 0, "top_k": 0}
OPENAI_ROUTES = {
    ("/v1/chat/completions", "POST"),
    ("/chat/completions", "POST"),
    ("/v1/completions", "POST"),
    ("/completions", "POST"),
    ("/v1/models", "GET"),
    ("/models", "GET"),
}


def _routes(app) -> set[tuple[str, str]]:
    return {(route.path, method) for route in app.routes for method in getattr(route, "methods", ()) or ()}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import mlflow

    files = tiny_served_files(tmp_path_factory.mktemp("openai"))
    config = load_config(None, [f"serving.{key}={value}" for key, value in LIMITED.items()])
    return mlflow.pyfunc.load_model(log_model(new_run("openai-routes"), *files[:2], config.serving.model_dump()))


@pytest.fixture
def client(model, monkeypatch):
    from fastapi.testclient import TestClient
    from mlflow.environment_variables import _MLFLOW_IS_IN_SERVING_ENVIRONMENT

    monkeypatch.setenv(_MLFLOW_IS_IN_SERVING_ENVIRONMENT.name, "false")  # MLflow's init sets it; put back after
    with TestClient(build_app(model, "models:/tiny-chat/1")) as test_client:
        yield test_client


def test_mlflows_routes_are_all_there_and_the_openai_ones_are_added(model, client, monkeypatch):
    from mlflow.pyfunc.scoring_server import init

    mlflows = _routes(init(model))
    assert {("/invocations", "POST"), ("/ping", "GET"), ("/health", "GET")} <= mlflows
    # and /metrics (/health is MLflow's path, answered by Foundry's own: tests/fast/serving/test_serving_operations.py)
    assert _routes(client.app) - mlflows == OPENAI_ROUTES | {("/metrics", "GET")} and mlflows <= _routes(client.app)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions"])
def test_the_openai_route_answers_what_invocations_answers(client, path):
    mlflows = client.post("/invocations", json=BODY)
    openais = client.post(path, json=BODY)
    assert mlflows.status_code == openais.status_code == 200
    same = {key: value for key, value in openais.json().items() if key not in ("id", "created")}
    assert same == {key: value for key, value in mlflows.json().items() if key not in ("id", "created")}
    assert same["object"] == "chat.completion" and same["model"] == "tiny-chat"
    assert same["usage"]["completion_tokens"] == 5 and same["choices"][0]["finish_reason"] == "length"


def test_a_request_that_names_no_model_is_answered_as_the_served_one(client):
    body = {key: value for key, value in BODY.items() if key != "model"}
    answer = client.post("/v1/chat/completions", json=body).json()
    assert answer["object"] == "chat.completion" and answer["model"] == "models:/tiny-chat/1"


@pytest.mark.parametrize(
    ("change", "param", "named"),
    [
        ({"max_tokens": 9}, "max_tokens", "max_tokens = 9: must be between 1 and 8"),
        ({"n": 2}, "n", "n = 2: this model answers one choice per request"),
        ({"temperature": -1}, "temperature", "params.temperature = -1"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages", "row 0: messages hold no user turn"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages", "row 0: messages: each turn needs a role"),
    ],
)
def test_a_refusal_is_the_same_400_in_openais_error_shape(client, change, param, named):
    mlflows = client.post("/invocations", json={**BODY, **change})
    openais = client.post("/v1/chat/completions", json={**BODY, **change})
    assert mlflows.status_code == openais.status_code == 400
    error = openais.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"].startswith(named), error
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, "INVALID_PARAMETER_VALUE")
    assert named in mlflows.json()["message"]


def test_invocations_refuses_stream_which_the_openai_route_streams(client):
    """MLflow's /invocations answers with one JSON body; tests/fast/serving/test_serving_stream.py streams."""
    refused = client.post("/invocations", json={**BODY, "stream": True})
    assert refused.status_code == 400 and "stream = True: answers are not streamed" in refused.json()["message"]
    streamed = client.post("/v1/chat/completions", json={**BODY, "stream": True})
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.text.endswith("data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("content", "named"),
    [(b"{not json", "the body is not JSON"), (b'{"prompt": "river"}', "messages: a chat-completions request")],
)
def test_a_body_that_is_no_chat_gets_400_before_the_model(client, content, named):
    answer = client.post("/v1/chat/completions", content=content, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and answer.json()["error"]["message"].startswith(named)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"top_p": 0.5}, "top_p"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"tools": []}, "tools"),
        ({"presence_penalty": 1}, "presence_penalty"),
    ],
)
def test_a_field_the_model_would_not_honour_is_refused_naming_it(client, change, param):
    answer = client.post("/v1/chat/completions", json={**BODY, **change})
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == param and error["message"].startswith(f"{param} = "), error


def test_openais_no_op_values_are_taken(client):
    plain = client.post("/v1/chat/completions", json=BODY).json()
    no_ops = {"top_p": 1, "frequency_penalty": 0, "presence_penalty": 0, "logprobs": False, "user": "someone"}
    answer = client.post("/v1/chat/completions", json={**BODY, **no_ops})
    assert answer.status_code == 200 and answer.json()["choices"] == plain["choices"]


def test_the_models_route_lists_the_one_served(client):
    listed = client.get("/v1/models").json()
    assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == ["models:/tiny-chat/1"]
    assert listed == client.get("/models").json() and listed["data"][0]["object"] == "model"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts_are_taken(host):
    assert check_host(host, allow_remote=False) == host


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::", "example.com"])
def test_other_hosts_need_the_flag(host):
    with pytest.raises(ValueError, match="--allow-remote"):
        check_host(host, allow_remote=False)
    assert check_host(host, allow_remote=True) == host


def test_the_command_refuses_a_remote_host_before_loading_anything(capsys):
    assert main(["serve-model", "models:/no-such-model/1", "--host", "0.0.0.0"]) == 2
    assert "--host 0.0.0.0: not a loopback address" in capsys.readouterr().err
