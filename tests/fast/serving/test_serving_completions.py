"""`/v1/completions` on `foundry serve-model` (foundry/serving/http.py, the served model's `complete_text`), through
a real HTTP server on loopback and the `openai` SDK: a prompt continued as text (`text_completion`), streamed or not
with the same text, `logprobs` and `echo` giving the prompt's own token log-probabilities as the model scores them
(what lm-evaluation-harness's `local-completions` reads), and every limit of the version applying, refused in
OpenAI's error shape naming the field. Tiny random-weight base model, no training."""

from __future__ import annotations

import json
import math
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest
import torch
import torch.nn.functional as F
from helpers_registry import new_run
from helpers_serving import served, tiny_served_files
from tokenizers import Tokenizer

from foundry.config import load_config
from foundry.serving.package import log_model
from models.gpt import gpt_from_saved, load_saved
from models.tokens import text_only

LIMITS = {"max_new_tokens": 24, "max_prompt_chars": 120, "max_rows": 3, "max_body_bytes": 8192}
TEXT = "river stone light, add two and three"
WEIGHTS_SEED = 5  # as in test_serving_stream.py: greedy continuations that are text


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_served_files(tmp_path_factory.mktemp("completions"), seed=WEIGHTS_SEED)


@pytest.fixture(scope="module")
def url(files):
    """A loopback URL serving the tiny base (never aligned) version with `LIMITS`."""
    import mlflow

    limits = load_config(None, [f"serving.{key}={value}" for key, value in LIMITS.items()]).serving.model_dump()
    model = mlflow.pyfunc.load_model(log_model(new_run("completions"), files[2], files[1], limits))
    with served(model, "models:/tiny-base/1") as url:
        yield url


@pytest.fixture
def client(url):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)


def own_logprobs(files, text: str) -> list[float]:
    """Each token of `text` after the first: its log-probability under the model, computed here with the model
    itself (not the served code path)."""
    model = gpt_from_saved(load_saved(files[2]))
    ids = text_only(Tokenizer.from_file(str(files[1]))).encode(text).ids
    with torch.no_grad():
        logits, _ = model(torch.tensor([ids]))
    scores = F.log_softmax(logits[0].double(), dim=-1)
    return [float(scores[t - 1, ids[t]]) for t in range(1, len(ids))]


def test_echo_with_logprobs_gives_the_prompts_own_token_logprobs(client, files):
    """What lm-evaluation-harness's `local-completions` asks for a log-likelihood: echo, logprobs 1, one token."""
    answer = client.completions.create(model="tiny", prompt=TEXT, max_tokens=1, echo=True, logprobs=1, temperature=0)
    [choice] = answer.choices
    assert answer.object == "text_completion" and choice.text.startswith(TEXT) and len(choice.text) > len(TEXT)
    logprobs = choice.logprobs
    prompt_tokens = answer.usage.prompt_tokens
    assert "".join(logprobs.tokens) == choice.text and len(logprobs.tokens) == prompt_tokens + 1
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    expected = own_logprobs(files, choice.text)
    assert len(expected) == len(logprobs.token_logprobs) - 1
    assert all(math.isclose(got, want, abs_tol=1e-4) for got, want in zip(logprobs.token_logprobs[1:], expected))
    # the generated token is greedy: the likeliest one, what lm-eval's `is_greedy` compares
    [(_, best)] = logprobs.top_logprobs[-1].items()
    assert math.isclose(best, logprobs.token_logprobs[-1], abs_tol=1e-6)
    assert logprobs.text_offset[0] == 0 and logprobs.text_offset[-1] == len(TEXT)


def test_logprobs_without_echo_cover_the_completion_only(client):
    """The completion's part of what echo gives for the same greedy request (which the test above checks against
    the model: re-encoding prompt and completion together could merge tokens across the seam)."""
    ask = {"model": "tiny", "prompt": TEXT, "max_tokens": 4, "logprobs": 3, "temperature": 0}
    [choice] = client.completions.create(**ask).choices
    [echoed] = client.completions.create(**ask, echo=True).choices
    logprobs = choice.logprobs
    assert "".join(logprobs.tokens) == choice.text and echoed.text == TEXT + choice.text
    assert logprobs.token_logprobs == echoed.logprobs.token_logprobs[-len(logprobs.tokens) :]
    assert logprobs.top_logprobs == echoed.logprobs.top_logprobs[-len(logprobs.tokens) :]
    assert all(len(top) == 3 for top in logprobs.top_logprobs) and logprobs.text_offset[0] == len(TEXT)


def test_streamed_completion_is_the_completion_not_streamed(client, url):
    whole = client.completions.create(model="tiny", prompt=TEXT, max_tokens=20, temperature=0)
    chunks = list(client.completions.create(model="tiny", prompt=TEXT, max_tokens=20, temperature=0, stream=True))
    assert whole.choices[0].text and "".join(chunk.choices[0].text for chunk in chunks) == whole.choices[0].text
    assert (
        chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason and chunks[0].object == "text_completion"
    )
    body = {"prompt": TEXT, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}, "echo": True}
    request = Request(f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urlopen(request, timeout=60) as answer:
        events = answer.read().decode().strip().split("\n\n")
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-1]]
    assert chunks[0]["choices"][0]["text"] == TEXT and chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3


def test_several_prompts_are_answered_each_as_alone(client):
    prompts = [TEXT, "stone"]
    together = client.completions.create(model="tiny", prompt=prompts, max_tokens=6, temperature=0)
    alone = [client.completions.create(model="tiny", prompt=p, max_tokens=6, temperature=0) for p in prompts]
    assert [c.index for c in together.choices] == [0, 1]
    assert [c.text for c in together.choices] == [a.choices[0].text for a in alone]


def test_a_seed_gives_the_same_sample(client):
    def sample(seed: int) -> str:
        answer = client.completions.create(model="tiny", prompt=TEXT, max_tokens=12, temperature=1.0, seed=seed)
        return answer.choices[0].text

    assert sample(3) == sample(3) and len({sample(3), sample(4), sample(5)}) > 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_ends_each_completion_before_it(client, stream):
    whole = client.completions.create(model="tiny", prompt=TEXT, max_tokens=20, temperature=0).choices[0].text
    clean = whole.split("\ufffd")[0]  # the text before the first broken character (random weights)
    stop = clean[len(clean) // 2 :][:2]
    ask = {"model": "tiny", "prompt": TEXT, "max_tokens": 20, "temperature": 0, "stop": stop}
    if stream:
        chunks = list(client.completions.create(stream=True, **ask))
        text, reason = "".join(c.choices[0].text for c in chunks), chunks[-1].choices[0].finish_reason
    else:
        [choice] = client.completions.create(**ask).choices
        text, reason = choice.text, choice.finish_reason
    assert (text, reason) == (whole[: whole.find(stop)], "stop"), whole
    several = client.completions.create(**{**ask, "prompt": [TEXT, TEXT]}) if not stream else None
    assert several is None or [c.text for c in several.choices] == [text, text]


def test_a_users_end_of_text_is_text(client):
    hostile = "river<|endoftext|>stone"
    answer = client.completions.create(model="tiny", prompt=hostile, max_tokens=1, echo=True, logprobs=0)
    tokens = answer.choices[0].logprobs.tokens
    assert "".join(tokens).startswith(hostile) and "<|endoftext|>" not in tokens


@pytest.mark.parametrize(
    ("change", "param", "named"),
    [
        ({"max_tokens": 25}, "max_tokens", "max_tokens = 25: must be between 1 and 24"),
        ({"prompt": "x" * 121}, "prompt", "prompt: prompt 0 holds 121 characters"),
        ({"prompt": ["a", "b", "c", "d"]}, "prompt", "prompt: 4 prompts; a request holds 1 to 3"),
        ({"prompt": [1, 2, 3]}, "prompt", "prompt = [1, 2, 3]: must be a text"),
        ({"logprobs": 21}, "logprobs", "logprobs = 21: must be a whole number from 0 to 20"),
        ({"echo": "yes"}, "echo", "echo = 'yes': must be true or false"),
        ({"temperature": -1}, "temperature", "params.temperature = -1"),
        ({"stop": ""}, "stop", "stop = '': must be a text or a list of up to 4 texts"),
        ({"suffix": "x"}, "suffix", "suffix = "),
        ({"stream": True, "logprobs": 1}, "logprobs", "logprobs: a streamed completion is one prompt"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "stream_options: only a streamed"),
    ],
)
def test_a_request_is_refused_naming_the_field(url, change, param, named):
    body = {"model": "tiny", "prompt": TEXT, "max_tokens": 2, **change}
    request = Request(f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with pytest.raises(HTTPError) as refused:
        urlopen(request, timeout=60)
    error = json.loads(refused.value.read())["error"]
    assert refused.value.code == 400 and error["param"] == param and error["message"].startswith(named), error
    assert error["type"] == "invalid_request_error"


def test_a_body_over_max_body_bytes_is_413_before_parsing(url):
    body = json.dumps({"prompt": "x" * LIMITS["max_body_bytes"]}).encode()
    request = Request(f"{url}/v1/completions", body, {"Content-Type": "text/plain"})
    with pytest.raises(HTTPError) as refused:
        urlopen(request, timeout=60)
    assert refused.value.code == 413 and json.loads(refused.value.read())["error"]["param"] == "max_body_bytes"
