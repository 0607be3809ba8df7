"""`foundry serve-model` under many clients (foundry/serving/operations.py, models/batching.py), through a real HTTP
server on loopback: concurrent requests (chats answered whole and streamed, completions, `/invocations` rows) are
generated together, each greedy answer the one it gets alone; `/metrics` in Prometheus' text format counts requests
by route and status, times them, counts output tokens and the queue; `/health` says the model is loaded. Tiny
random-weight aligned version, no training."""

from __future__ import annotations

import json
import threading
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest
from helpers_registry import new_run
from helpers_serving import served, tiny_served_files
from prometheus_client.parser import text_string_to_metric_families

from foundry.config import load_config
from foundry.serving.package import log_model

WEIGHTS_SEED = 5  # as in test_serving_stream.py: greedy replies that are text, not one control token repeated
CHATS = ["river stone", "add two and three", "light", "mill water", "five"]
PROMPTS = ["river", "add two and three: five, and", "stone light on the water", "x"]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    import mlflow

    files = tiny_served_files(tmp_path_factory.mktemp("operations"), seed=WEIGHTS_SEED)
    limits = load_config(None, ["serving.max_new_tokens=48"]).serving.model_dump()
    model = mlflow.pyfunc.load_model(log_model(new_run("operations"), files[0], files[1], limits))
    with served(model, "models:/tiny-ops/1") as url:
        yield url


def _post(url: str, path: str, body: dict) -> tuple[int, str]:
    request = Request(f"{url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urlopen(request, timeout=120) as answer:
            return answer.status, answer.read().decode()
    except HTTPError as exc:
        return exc.code, exc.read().decode()


def _text(path: str, status: int, raw: str) -> str:
    """The generated text of an answer: a chat's reply, a completion, a stream's joined deltas, a row's completion."""
    assert status == 200, raw
    if raw.startswith("data: "):
        events = [json.loads(e.removeprefix("data: ")) for e in raw.strip().split("\n\n")[:-1]]
        return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    answer = json.loads(raw)
    if path == "/invocations":
        return answer["predictions"][0]["completion"]
    choice = answer["choices"][0]
    return choice["message"]["content"] if "message" in choice else choice["text"]


def _requests() -> list[tuple[str, dict]]:
    """Greedy requests of every kind the server generates for, of mixed lengths."""
    out = []
    for i, text in enumerate(CHATS):
        chat = {"messages": [{"role": "user", "content": text}], "max_tokens": 8 + 9 * i, "temperature": 0}
        out += [("/v1/chat/completions", chat), ("/v1/chat/completions", {**chat, "stream": True})]
    for i, text in enumerate(PROMPTS):
        out.append(("/v1/completions", {"prompt": text, "max_tokens": 40 - 9 * i, "temperature": 0}))
    rows = {"dataframe_records": [{"prompt": p} for p in PROMPTS[:2]], "params": {"temperature": 0, "top_k": 1}}
    out.append(("/invocations", {**rows, "params": {**rows["params"], "max_new_tokens": 20}}))
    return out


def _metrics(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    with urlopen(f"{url}/metrics", timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_concurrent_clients_are_batched_and_each_greedy_answer_is_the_one_alone(url):
    requests = _requests()
    alone = [_text(path, *_post(url, path, body)) for path, body in requests]  # one at a time: each alone
    assert len(set(alone)) > len(requests) // 2 and all(alone)  # varied text: a mix-up between rows would show
    before = _metrics(url)
    together: list[str | None] = [None] * len(requests)
    start = threading.Barrier(len(requests))

    def client(i: int) -> None:
        path, body = requests[i]
        start.wait()
        together[i] = _text(path, *_post(url, path, body))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert together == alone
    after = _metrics(url)
    steps = after[("foundry_batch_steps", ())] - before[("foundry_batch_steps", ())]
    rows = after[("foundry_batch_row_steps", ())] - before[("foundry_batch_row_steps", ())]
    assert rows > 2 * steps  # generated together: more than 2 rows per forward on average


def test_metrics_count_requests_by_route_and_status_with_latency_tokens_and_queue(url):
    before = _metrics(url)
    chat = {"messages": [{"role": "user", "content": "river"}], "max_tokens": 5, "temperature": 0}
    assert _post(url, "/v1/chat/completions", chat)[0] == 200
    assert _post(url, "/v1/chat/completions", {**chat, "max_tokens": 10_000})[0] == 400
    assert _post(url, "/v1/chat/completions", {**chat, "stream": True})[0] == 200
    after = _metrics(url)

    def grew(name: str, **labels) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0)

    route = "/v1/chat/completions"
    assert grew("foundry_requests_total", route=route, status="200") == 2
    assert grew("foundry_requests_total", route=route, status="400") == 1
    assert grew("foundry_request_seconds_count", route=route) == 3
    assert grew("foundry_first_byte_seconds_count", route=route) == 3
    assert grew("foundry_request_seconds_bucket", route=route, le="+Inf") == 3
    assert grew("foundry_generated_tokens_count") == 2 and grew("foundry_generated_tokens_sum") == 10
    assert after[("foundry_queue_depth", ())] == 0 and after[("foundry_batch_rows", ())] == 0
    assert _post(url, "/no/such/route", {})[0] == 404
    assert _metrics(url)[("foundry_requests_total", (("route", "other"), ("status", "404")))] >= 1


def test_the_queue_depth_counts_the_requests_waiting_for_a_row(tmp_path_factory):
    """Batches of 1 row and 4 clients at once: while one generates, the others wait, and `/metrics` and `/health`
    say so (the test above sees the queue only empty)."""
    import mlflow

    files = tiny_served_files(tmp_path_factory.mktemp("one-row"), seed=WEIGHTS_SEED)
    limits = load_config(None, ["serving.max_new_tokens=48"]).serving.model_dump()
    model = mlflow.pyfunc.load_model(log_model(new_run("one-row"), files[0], files[1], limits))
    path, chat = "/v1/chat/completions", {"messages": [{"role": "user", "content": "river stone"}], "max_tokens": 48}
    chat["temperature"] = 0  # greedy: the same reply for every client, none cut short by a sampled end
    with served(model, "models:/tiny-one-row/1", max_batch_rows=1) as url:
        statuses: list[int] = []
        threads = [threading.Thread(target=lambda: statuses.append(_post(url, path, chat)[0])) for _ in range(4)]
        for thread in threads:
            thread.start()
        depths, waiting = [], []
        while any(thread.is_alive() for thread in threads):
            depths.append(_metrics(url)[("foundry_queue_depth", ())])
            with urlopen(f"{url}/health", timeout=30) as answer:
                waiting.append(json.loads(answer.read())["queue_depth"])
        for thread in threads:
            thread.join(120)
        assert statuses == [200] * 4 and max(depths) > 0 and max(waiting) > 0, (statuses, depths, waiting)
        assert max(depths) <= 3 and _metrics(url)[("foundry_queue_depth", ())] == 0  # one generating at most


def test_health_says_the_model_is_loaded(url):
    with urlopen(f"{url}/health", timeout=30) as answer:
        assert answer.status == 200
        health = json.loads(answer.read())
    assert health["status"] == "ok" and health["model_loaded"] is True and health["model"] == "models:/tiny-ops/1"
    assert health["queue_depth"] == 0 and health["max_batch_rows"] == 32
    with urlopen(f"{url}/ping", timeout=30) as answer:  # MLflow's own, unchanged
        assert answer.status == 200


def test_the_command_refuses_an_empty_batch_before_loading_anything(capsys):
    from foundry.cli import main

    assert main(["serve-model", "models:/no-such-model/1", "--max-batch-rows", "0"]) == 2
    assert "--max-batch-rows 0: the batch needs room for 1 row or more" in capsys.readouterr().err
