"""`stream: true` on `foundry serve-model`'s `/v1/chat/completions` (foundry/serving/http.py), through a real HTTP
server on loopback (uvicorn running `build_app`, as `foundry serve-model` does) and the `openai` SDK: chunks as
OpenAI sends them, the same text as the answer not streamed, tokens sent as they are generated, refusals before any
chunk in OpenAI's error shape. And the incremental decoding under it (models/chat_completion.py). Tiny random-weight
model, no training."""

from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.request import Request, urlopen

import pytest
from helpers_registry import new_run
from helpers_serving import serve_model_process, served, tiny_served_files
from helpers_tokenizers import plain_tokenizer

from foundry.config import load_config
from foundry.serving.package import log_model
from models.chat_completion import TextPieces

MAX_TOKENS = 200  # the version's limit: long enough that generating it takes a while on any machine
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "river stone"}]
GREEDY = {"messages": CHAT, "temperature": 0}
# Weights whose greedy reply to CHAT is text, not a control token over and over (what seed 0's is): a marker, then
# letters, then a longer piece repeated.
WEIGHTS_SEED = 5


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny aligned version, with `max_new_tokens` of `MAX_TOKENS`, loaded as the server loads it."""
    import mlflow

    files = tiny_served_files(tmp_path_factory.mktemp("stream"), seed=WEIGHTS_SEED)
    limits = load_config(None, [f"serving.max_new_tokens={MAX_TOKENS}"]).serving.model_dump()
    return mlflow.pyfunc.load_model(log_model(new_run("stream"), files[0], files[1], limits))


@pytest.fixture(scope="module")
def url(model):
    with served(model, "models:/tiny-chat/1") as url:
        yield url


@pytest.fixture
def client(url):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)


def _events(url: str, body: dict) -> list[str]:
    """The raw `data:` lines of a streamed answer, as a client without the SDK reads them."""
    request = Request(f"{url}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urlopen(request, timeout=120) as answer:
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        text = answer.read().decode()
    assert text.endswith("\n\n") and all(event.startswith("data: ") for event in text.strip().split("\n\n"))
    return [event.removeprefix("data: ") for event in text.strip().split("\n\n")]


@pytest.mark.parametrize(
    ("max_tokens", "sampled"),
    [(3, GREEDY), (MAX_TOKENS, GREEDY), (40, {"messages": CHAT, "temperature": 1.0, "seed": 7})],
)
def test_streamed_text_is_the_text_not_streamed(client, max_tokens, sampled):
    """Greedy, and seeded sampling (random bytes, many of them incomplete characters, held back and sent later)."""
    kwargs = {"model": "tiny", "max_tokens": max_tokens, "messages": sampled["messages"]}
    kwargs |= {"temperature": sampled["temperature"], "seed": sampled.get("seed")}
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].object == "chat.completion.chunk"
    assert len({chunk.id for chunk in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert text == whole.choices[0].message.content and text
    reasons = [chunk.choices[0].finish_reason for chunk in chunks]
    assert reasons[-1] == whole.choices[0].finish_reason and set(reasons[:-1]) == {None}
    assert chunks[-1].choices[0].delta.content is None and chunks[-1].usage is None
    assert len(chunks) > 3  # a chunk per token, not the reply in one


def test_include_usage_sends_a_last_chunk_with_the_counts_then_done(url, client):
    whole = client.chat.completions.create(model="tiny", max_tokens=5, **GREEDY)
    body = {**GREEDY, "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    events = _events(url, body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole.usage.model_dump(
        include={"prompt_tokens", "completion_tokens", "total_tokens"}
    )
    assert all(chunk["usage"] is None for chunk in chunks[:-1]) and chunks[-2]["choices"][0]["finish_reason"]
    assert chunks[0]["model"] == "models:/tiny-chat/1"  # the request named none


def test_tokens_are_sent_as_they_are_generated(client):
    """The first text arrives while most of the reply is still to be generated: in well under half the time the
    whole stream takes (a server that sent everything at the end would deliver both at the same moment)."""
    start = time.monotonic()
    arrived = []
    for chunk in client.chat.completions.create(model="tiny", max_tokens=MAX_TOKENS, stream=True, **GREEDY):
        if chunk.choices and chunk.choices[0].delta.content:
            arrived.append(time.monotonic() - start)
    total = time.monotonic() - start
    assert len(arrived) > MAX_TOKENS // 2, "the reply stopped early: the test needs a long one"
    assert arrived[0] < total / 3, (arrived[0], total)


def test_foundry_serve_model_streams_a_registered_version_to_the_openai_sdk(tmp_path):
    """The command itself, in its own process, on a tiny registered version: the SDK's stream joins to the reply
    not streamed, and `/v1/completions` answers in the same process."""
    import openai

    from foundry.registry import versions

    files = tiny_served_files(tmp_path, seed=WEIGHTS_SEED)
    run = new_run("stream-process")
    version = versions.register(log_model(run, files[0], files[1]), "tiny-stream", run, {})
    with serve_model_process(f"models:/tiny-stream/{version}", tmp_path) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)
        whole = client.chat.completions.create(model="tiny", max_tokens=16, **GREEDY).choices[0].message.content
        chunks = list(client.chat.completions.create(model="tiny", max_tokens=16, stream=True, **GREEDY))
        completion = client.completions.create(model="tiny", prompt="river", max_tokens=4, temperature=0)
    assert whole and "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == whole
    assert completion.object == "text_completion" and completion.usage.completion_tokens >= 1


@pytest.mark.parametrize(
    ("change", "param", "named"),
    [
        ({"max_tokens": MAX_TOKENS + 1}, "max_tokens", f"max_tokens = {MAX_TOKENS + 1}: must be between 1 and"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages", "row 0: messages hold no user turn"),
        ({"n": 2}, "n", "n = 2: this model answers one choice per request"),
        ({"stream_options": {"include_usage": "yes"}}, "stream_options", "stream_options.include_usage"),
        ({"stream_options": {"other": 1}}, "stream_options", "stream_options = "),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "stop = ['a', 'b', 'c', 'd', 'e']: must be a text or"),
        ({"logit_bias": {"1": 5}}, "logit_bias", "logit_bias = "),
        ({"logprobs": True}, "logprobs", "logprobs: a streamed reply comes without log-probabilities"),
    ],
)
def test_a_streamed_request_is_refused_before_any_chunk_naming_the_field(client, change, param, named):
    import openai

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="tiny", **{**GREEDY, "max_tokens": 4, "stream": True, **change})
    assert refused.value.status_code == 400 and refused.value.param == param, refused.value.body
    assert refused.value.body["message"].startswith(named), refused.value.body


def test_stream_options_without_stream_is_refused(client):
    import openai

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="tiny", max_tokens=4, stream_options={"include_usage": True}, **GREEDY)
    assert refused.value.param == "stream_options"


def test_nothing_is_generated_once_the_client_has_gone(model, url, client):
    """The chunks the server asks the served model's stream for, counted: after the client closes its connection
    at the first chunk, a few more at most (those in flight), not the MAX_TOKENS a finished reply takes; and the
    server answers the next request."""
    python_model = model.unwrap_python_model()
    stream_chat, asked = python_model.stream_chat, []

    def counted(body, include_usage=False):
        for chunk in stream_chat(body, include_usage):
            asked.append(chunk)
            yield chunk

    python_model.stream_chat = counted  # an instance attribute over the method: deleted below
    try:
        body = {**GREEDY, "max_tokens": MAX_TOKENS, "stream": True}
        connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=60)
        connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        assert connection.getresponse().read1(64).startswith(b"data: ")
        connection.sock.shutdown(socket.SHUT_RDWR)
        connection.close()
        time.sleep(1)  # a whole reply takes about 1 s here: ten chunks, a tenth of that
        assert len(asked) < 10, len(asked)
        list(client.chat.completions.create(model="tiny", max_tokens=MAX_TOKENS, stream=True, **GREEDY))
        assert len(asked) > MAX_TOKENS  # what the test's own bound is measured against: the reply in full
    finally:
        del python_model.stream_chat


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_ends_the_reply_before_it(client, stream):
    """The greedy reply cut where a stop string first appears, the string itself left out, `finish_reason` stop;
    streamed or not. One stop string spans several tokens (held back until it is clear)."""
    whole = client.chat.completions.create(model="tiny", max_tokens=60, **GREEDY).choices[0].message.content
    stop = whole[14:19]
    expected = whole[: whole.find(stop)]
    ask = {"model": "tiny", "max_tokens": 60, "stop": ["never in it", stop], **GREEDY}
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **ask))
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
        reason = chunks[-1].choices[0].finish_reason
    else:
        [choice] = client.chat.completions.create(**ask).choices
        text, reason = choice.message.content, choice.finish_reason
    assert (text, reason) == (expected, "stop") and len(expected) < len(whole), whole


def test_chat_logprobs_are_the_models_own_for_each_reply_token(model, client):
    """`logprobs` with `top_logprobs`: each reply token's log-probability after the rendered chat, as the model
    itself scores it (computed here), its bytes, and the likeliest tokens (greedy: the first is the token)."""
    import torch
    import torch.nn.functional as F

    from models.generate import generate_ids, prompt_ids
    from models.request_limits import DEFAULTS

    plain = client.chat.completions.create(model="tiny", max_tokens=12, **GREEDY).choices[0]
    [choice] = client.chat.completions.create(
        model="tiny", max_tokens=12, logprobs=True, top_logprobs=2, **GREEDY
    ).choices
    assert choice.message.content == plain.message.content and choice.finish_reason == plain.finish_reason
    content = choice.logprobs.content
    served = model.unwrap_python_model()
    ids = prompt_ids(served.model, served.tokenizer, served.template, CHAT)
    end = served.template.token_id(served.tokenizer, served.template.end)
    [reply] = generate_ids(served.model, [ids], 12, 0.0, DEFAULTS["top_k"], DEFAULTS["seed"], end)
    assert [entry.token for entry in content] == [
        served.tokenizer.decode([t], skip_special_tokens=False) for t in reply
    ]
    control = set(served.tokenizer.get_added_tokens_decoder())  # their bytes are their names: not in the text
    spelled = b"".join(bytes(entry.bytes) for entry, token in zip(content, reply) if token not in control)
    assert spelled.decode().removeprefix(served.template.content_prefix) == choice.message.content
    with torch.no_grad():
        logits, _ = served.model(torch.tensor([ids + reply]))
    scores = F.log_softmax(logits[0].double(), dim=-1)
    expected = [float(scores[len(ids) + i - 1, token]) for i, token in enumerate(reply)]
    assert all(abs(entry.logprob - want) < 1e-4 for entry, want in zip(content, expected, strict=True))
    assert all(len(entry.top_logprobs) == 2 and entry.top_logprobs[0].logprob == entry.logprob for entry in content)


@pytest.mark.parametrize(
    ("change", "param"),
    [({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs")],
)
def test_chat_logprobs_are_refused_naming_the_field(client, change, param):
    import openai

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="tiny", max_tokens=2, **GREEDY, **change)
    assert refused.value.param == param, refused.value.body


def test_pieces_never_split_a_multibyte_character():
    """Byte-level BPE spells "é" and "🙂" over several tokens, each alone decoding to U+FFFD: no piece carries one,
    and the pieces join to the whole text."""
    tokenizer = plain_tokenizer()
    text = "river é stone 🙂 light ü"
    ids = tokenizer.encode(text).ids
    assert any("\ufffd" in tokenizer.decode([token]) for token in ids)  # the case this test is about
    pieces = TextPieces(tokenizer.decode)
    sent = [pieces.push(token) for token in ids] + [pieces.rest()]
    assert "".join(sent) == text and not any("\ufffd" in piece for piece in sent)


def test_an_incomplete_character_at_the_end_is_sent_as_the_decoder_gives_it():
    tokenizer = plain_tokenizer()
    ids = tokenizer.encode("stone 🙂").ids[:-1]  # the emoji's last byte never came
    pieces = TextPieces(tokenizer.decode)
    sent = [pieces.push(token) for token in ids] + [pieces.rest()]
    assert "".join(sent) == tokenizer.decode(ids) and sent[-1].endswith("\ufffd")


def test_text_that_may_begin_a_stop_string_is_held_back_until_it_cannot():
    tokenizer = plain_tokenizer()
    ids = tokenizer.encode("river stone light, add two").ids
    pieces = TextPieces(tokenizer.decode, ("stone dark", "two"))
    sent = []
    for token in ids:
        sent.append(pieces.push(token))
        assert not "".join(sent).endswith(("s", "st", "sto", "ston", "stone", "t", "tw")) or pieces.stopped
    sent.append(pieces.rest())
    assert "".join(sent) == "river stone light, add " and pieces.stopped
