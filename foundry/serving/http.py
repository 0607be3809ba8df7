"""`foundry serve-model`: one registered version over HTTP, as `mlflow models serve` serves it, plus the routes an
OpenAI client calls.

MLflow's scoring app (`mlflow.pyfunc.scoring_server.init`, what `mlflow models serve` runs) answers `/invocations`,
`/ping`, `/health` and `/version`; an OpenAI client POSTs to `{base_url}/chat/completions`, which that app does not
have. This app is MLflow's own with more routes:

- `POST /v1/chat/completions` (and `/chat/completions`): the body goes through the same `invocations` call as a
  body posted to `/invocations`, so the same checks and the same `chat.completion` answer (the served model's
  `predict`, foundry/serving/pyfunc_model.py). A refusal comes back with the same status in OpenAI's error shape,
  `{"error": {"message", "type", "param", "code"}}`, which the OpenAI SDK raises as `BadRequestError`.
  With `stream: true` the reply comes as server-sent events instead, `chat.completion.chunk`s sent as each token
  is generated, then `data: [DONE]` (the served model's `stream_chat`; MLflow's `/invocations` cannot stream).
  A chat with `stop` or `logprobs` is answered by the served model's `answer_chat`, not through `invocations`:
  MLflow's signature names neither, and its server would drop them.
- `POST /v1/completions` (and `/completions`): a prompt continued as text, `text_completion` (the served model's
  `complete_text`), streamed the same way with `stream: true`.
- `GET /v1/models` (and `/models`): the one model served, for the SDK's `models.list()`.

Every body posted to `/invocations` or an OpenAI route is read by `BoundedBody` before any route sees it:
over the version's `max_body_bytes` (its `serving` config; `MAX_BODY_BYTES` for a version that saved none) it is
answered 413 as soon as its `Content-Length`, or the bytes read so far when it is chunked, pass the limit; a JSON body
that does not parse or nests deeper than `MAX_JSON_DEPTH` is answered 400, and so is one holding a list longer than
the version's turns or rows allow, or (an image classifier) a text longer than its largest image's base64
(`check_sizes`: before MLflow makes a frame of every item or decodes the text). All in OpenAI's error shape, on both
routes: MLflow's own app answers a body it cannot parse in its own shape, and one nested 1,000 deep with a bare 500.
An image classifier's `/invocations` answers the model's own refusals (its images' sizes) in the same shape, `param`
the field they name (`image_invocations`), so that all of its refusals read alike; a text model's keeps MLflow's.
A refusal while a streamed answer is generated (the version's `max_request_s`) ends the stream with an error event.

Loopback only unless `allow_remote`: the server has no authentication, and anyone who reaches it can generate.
"""

# No `from __future__ import annotations`: FastAPI reads the route's `Request` hint, imported in `build_app`.
import ipaddress
import json
import re
import time
from collections.abc import Iterator
from typing import NamedTuple

from models.request_limits import (
    CHAT_COMPLETION_FIELDS,
    DEFAULTS,
    IMAGE_LIMITS,
    MAX_BODY_BYTES,
    base64_chars,
    saved_limits,
)

DEFAULT_PORT = 8000
REMOTE_FLAG = "--allow-remote"
LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
# The request fields a refusal's message can start with (after `row N: ` or `params.`): the error's `param`.
PARAMS = {"messages", "stop", "logprobs", "top_logprobs", *CHAT_COMPLETION_FIELDS, *DEFAULTS}
_NAMED_FIELD = re.compile(r"(?:row \d+: )?(?:params\.)?([a-z_]+)\b")
_PREDICT_PREFIX = "Failed to predict data "  # what MLflow's `invocations` puts before the model's message
# OpenAI's fields that change nothing at these values; any other value, or a field the served model does not read
# (`stop`, `tools`, `logprobs`...), is refused: MLflow would drop it with only a log line, and the caller would get
# an answer to a request it did not make.
NO_OP_FIELDS = {"top_p": 1, "frequency_penalty": 0, "presence_penalty": 0, "logprobs": False, "user": None}
CHAT_ROUTES = ("/v1/chat/completions", "/chat/completions")
COMPLETION_ROUTES = ("/v1/completions", "/completions")
OPENAI_ROUTES = {*CHAT_ROUTES, *COMPLETION_ROUTES}  # their bodies are JSON whatever the Content-Type says
BODY_ROUTES = {"/invocations", *OPENAI_ROUTES}  # the routes that read a body
# What `/v1/completions` reads (the served model's `complete_text`); others as for chat (`NO_OP_FIELDS`).
COMPLETION_FIELDS = {"prompt", "model", "max_tokens", "n", "stream", "logprobs", "echo", "stop", *DEFAULTS}
# Deeper than any request these routes take (a chat with image parts nests 6 deep), far below where json.loads or
# the code after it runs out of Python's stack.
MAX_JSON_DEPTH = 32


def check_host(host: str, allow_remote: bool) -> str:
    """The host to listen on; a ValueError for one that is not loopback unless `allow_remote`. A name other than
    localhost counts as remote: it is never looked up (that would leave the machine)."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host.lower() in LOCAL_NAMES
    if not loopback and not allow_remote:
        raise ValueError(
            f"--host {host}: not a loopback address; the server has no authentication, so anyone who reaches it "
            f"can generate. Pass {REMOTE_FLAG} to listen there anyway, or use 127.0.0.1"
        )
    return host


def openai_error(status: int, message: str, code: str | None = None, param: str | None = None):
    """A JSON response in OpenAI's error shape; `param` is the request field the message starts with, if any."""
    from fastapi.responses import JSONResponse

    return JSONResponse(error_body(status, message, code, param), status_code=status)


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    """`openai_error`'s body: `{"error": {"message", "type", "param", "code"}}`."""
    if message.startswith(_PREDICT_PREFIX):  # drop MLflow's echo of the whole parsed input
        message = message.partition("\nError: ")[2] or message
    named = _NAMED_FIELD.match(message)
    param = param or (named.group(1) if named and named.group(1) in PARAMS else None)
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class BadBody(ValueError):
    """A chat-completions body refused before the model: `param` is the field at fault, if one is."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def _unsupported(body: dict, honoured: set[str] = PARAMS) -> str | None:
    """The first field of the body that the served model would not honour, if any."""
    for field, value in body.items():
        if field in honoured or field == "user" or (field in NO_OP_FIELDS and value == NO_OP_FIELDS[field]):
            continue
        return field
    return None


def _nests_deeper(value, limit: int) -> bool:
    """Whether lists and objects in `value` nest more than `limit` deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class Bounds(NamedTuple):
    """What no list and no text of a request to a version exceeds: `items` (its turns per chat or its rows, whichever
    is more) and, for an image classifier, `chars`: the base64 length of its largest image (MLflow decodes a text
    before the model sees it; a text model checks its own texts, which MLflow hands over as they are)."""

    items: int
    chars: int | None = None


def request_bounds(model_config: dict | None) -> Bounds:
    """The version's `Bounds`, from the limits it saved (`LIMITS`' where it saved none)."""
    saved = model_config or {}
    if "max_image_bytes" in saved:  # an image classifier: its rows' images
        limits = saved_limits(saved, IMAGE_LIMITS)
        return Bounds(limits["max_rows"], base64_chars(limits["max_image_bytes"]))
    limits = saved_limits(saved)
    return Bounds(max(limits["max_turns"], limits["max_rows"]))


def parsed_json(raw: bytes, bounds: Bounds | None = None):
    """The body's JSON value; a BadBody when it is not JSON, holds a list or a text longer than `bounds` (if given)
    or nests deeper than `MAX_JSON_DEPTH`."""
    too_deep = f"the body nests lists and objects more than {MAX_JSON_DEPTH} deep; no request here needs that many"
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadBody(f"the body is not JSON: {exc}") from None
    except RecursionError:  # json.loads of a body nested about 1,000 deep
        raise BadBody(too_deep) from None
    if bounds is not None:  # first: it stops at a long list, where the depth walk would visit every item
        check_sizes(body, bounds)
    if isinstance(body, dict | list) and _nests_deeper(body, MAX_JSON_DEPTH):
        raise BadBody(too_deep)
    return body


def check_sizes(body, bounds: Bounds) -> None:
    """A BadBody naming the first field (the key above it) that holds a list of more than `bounds.items` items or a
    text of more than `bounds.chars` characters: no request to the version needs one, and the model would refuse it
    only after MLflow has made a frame of every item (400,000 empty turns: a minute) or base64-decoded the text (an
    image's). Walked from the top, a long list refused before its items are looked at."""
    stack, kinds = [("body", body)], (dict, list) if bounds.chars is None else (dict, list, str)
    while stack:
        key, node = stack.pop()
        if isinstance(node, str) and bounds.chars is not None and len(node) > bounds.chars:
            raise BadBody(  # only an image classifier's bounds count characters: the key is its field
                f"{key}: a text of {len(node)} characters; no text in a request to this version is longer than "
                f"{bounds.chars}, the base64 of its largest image, so it is refused before it is decoded",
                key,
            )
        if isinstance(node, list) and len(node) > bounds.items:
            raise BadBody(
                f"{key}: a list of {len(node)} items; no list in a request to this version holds more than "
                f"{bounds.items} (its serving.max_turns and max_rows), so it is refused before any item is read",
                key if key in PARAMS else None,
            )
        if isinstance(node, dict | list):
            items = node.items() if isinstance(node, dict) else ((key, child) for child in node)
            stack.extend((name, child) for name, child in items if isinstance(child, kinds))


def _is_json(headers: dict[bytes, bytes]) -> bool:
    return headers.get(b"content-type", b"").split(b";")[0].strip().lower() == b"application/json"


class BoundedBody:
    """ASGI middleware for `BODY_ROUTES`: the body read whole, at most `max_body_bytes` of it (413 past that, checked
    from `Content-Length` before reading and from the bytes read), a JSON one parsed once to refuse what is not JSON
    or nests too deep (400), then handed to the route as it came. Other requests pass untouched."""

    def __init__(self, app, max_body_bytes: int, bounds: Bounds):
        self.app, self.limit, self.bounds = app, max_body_bytes, bounds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in BODY_ROUTES:
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            return await self._too_large(f"{int(declared)} bytes (Content-Length)", scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await self._too_large(f"more than {self.limit} bytes", scope, receive, send)
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        if scope["path"] in OPENAI_ROUTES or _is_json(headers):
            try:
                parsed_json(raw, self.bounds)
            except BadBody as exc:
                return await openai_error(400, str(exc), "invalid_request", exc.param)(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        return await self.app(scope, replay, send)

    async def _too_large(self, size: str, scope, receive, send):
        message = f"the body is {size}; this server takes at most {self.limit} (serving.max_body_bytes)"
        return await openai_error(413, message, "request_too_large", param="max_body_bytes")(scope, receive, send)


def chat_completions_body(raw: bytes, model_id: str) -> dict:
    """The request: a JSON object with `messages`, its `model` the served one's when the request names none (so that
    the answer is in the chat-completions shape); a BadBody saying what is wrong."""
    return openai_body(raw, model_id, "messages", PARAMS, "chat-completions")


def completions_body(raw: bytes, model_id: str) -> dict:
    """A `/v1/completions` request: a JSON object with `prompt`, checked as `chat_completions_body` checks a chat."""
    return openai_body(raw, model_id, "prompt", COMPLETION_FIELDS, "completions")


def openai_body(raw: bytes, model_id: str, required: str, honoured: set[str], kind: str) -> dict:
    """The request, a JSON object holding `required` and no field outside `honoured` (but `NO_OP_FIELDS` at their
    values, and `stream_options` beside `stream: true`), `model` the served one's when it names none."""
    body = parsed_json(raw)
    if not isinstance(body, dict) or required not in body:
        raise BadBody(f"{required}: a {kind} request is a JSON object with `{required}`", required)
    options = body.get("stream_options")
    if options is not None and body.get("stream") is not True:
        raise BadBody("stream_options: only a streamed request (stream = true) takes it", "stream_options")
    field = _unsupported({key: value for key, value in body.items() if key != "stream_options"}, honoured)
    if field is not None:
        reads = ", ".join(sorted(honoured | {"stream_options"}))
        raise BadBody(f"{field} = {json.dumps(body[field])[:80]}: not supported (this model reads {reads})", field)
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_usage"}):
        raise BadBody(f"stream_options = {json.dumps(options)[:80]}: takes only include_usage", "stream_options")
    if not isinstance((options or {}).get("include_usage", False), bool):
        raise BadBody("stream_options.include_usage: must be true or false", "stream_options")
    if not isinstance(body.get("stream", False), bool):
        raise BadBody(f"stream = {json.dumps(body['stream'])[:40]}: must be true or false", "stream")
    body.setdefault("model", model_id)
    return body


def server_sent_events(chunks: Iterator[dict]) -> Iterator[str]:
    """Each chunk as one server-sent event, `data: [DONE]` after the last, as OpenAI ends a stream. A refusal while
    the chunks are generated (the request's time limit: `serving.max_request_s`) comes as one more event, an error in
    OpenAI's shape (which the OpenAI SDK raises), then `[DONE]`: the status line has gone already."""
    from mlflow.exceptions import MlflowException

    try:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
    except MlflowException as exc:
        yield f"data: {json.dumps(error_body(exc.get_http_status_code(), exc.message, exc.error_code))}\n\n"
    yield "data: [DONE]\n\n"


def model_list(model_id: str, created: int) -> dict:
    return {"object": "list", "data": [{"id": model_id, "object": "model", "created": created, "owned_by": "foundry"}]}


def image_invocations(app, model) -> None:
    """MLflow's `/invocations` route replaced by the same call answering its refusals in OpenAI's error shape, `param`
    the refusal's own (an image classifier's: foundry/serving/vision_pyfunc.py), as the body's checks answer."""
    import asyncio

    from fastapi import Request
    from fastapi.responses import Response
    from mlflow.exceptions import MlflowException
    from mlflow.pyfunc.scoring_server import invocations

    schema = model.metadata.get_input_schema()

    async def answered(request: Request):
        content_type = request.headers.get("content-type") or ""
        try:  # a thread, as MLflow's route: the model must not block the event loop
            result = await asyncio.to_thread(invocations, await request.body(), content_type, model, schema)
        except MlflowException as exc:
            status = exc.get_http_status_code()
            return openai_error(status, exc.message, exc.error_code, getattr(exc, "param", None))
        if result.status != 200:
            return openai_error(result.status, result.response)
        return Response(content=result.response, status_code=200, media_type=result.mimetype)

    app.router.routes[:] = [route for route in app.router.routes if getattr(route, "path", None) != "/invocations"]
    app.post("/invocations")(answered)


def build_app(model, model_id: str, max_batch_rows: int | None = None, batch_window_s: float | None = None):
    """MLflow's scoring app for the loaded `model` (a PyFuncModel) with the OpenAI routes added, requests batched
    together (up to `max_batch_rows` rows; `batch_window_s`, the first one's wait for others: None, the defaults of
    `models.batching`), `/metrics` and `/health` (foundry/serving/operations.py)."""
    import asyncio

    from fastapi import Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from mlflow.exceptions import MlflowException
    from mlflow.pyfunc.scoring_server import CONTENT_TYPE_JSON, init, invocations

    from foundry.serving import operations
    from models.batching import MAX_ROWS, WINDOW_S

    app = init(model)
    saved = model.model_config or {}
    max_body_bytes = int(saved.get("max_body_bytes", MAX_BODY_BYTES))
    bounds = request_bounds(saved)
    app.add_middleware(BoundedBody, max_body_bytes=max_body_bytes, bounds=bounds)
    if bounds.chars is not None:  # an image classifier
        image_invocations(app, model)
    rows, window = max_batch_rows or MAX_ROWS, WINDOW_S if batch_window_s is None else batch_window_s
    operations.install(app, model, model_id, BODY_ROUTES | {"/v1/models", "/models"}, rows, window)
    schema = model.metadata.get_input_schema()
    created = int(time.time())

    async def chat_completions(request: Request):
        try:
            body = chat_completions_body(await request.body(), model_id)
        except BadBody as exc:
            return openai_error(400, str(exc), "invalid_request", param=exc.param)
        if body.get("stream") is True:
            return await streamed(body)
        if any(body.get(field) is not None for field in ("stop", "logprobs", "top_logprobs")):
            return await answered(body)  # fields MLflow's signature lacks (its server would drop them)
        try:  # a thread, as MLflow's /invocations does: generation must not block the event loop
            result = await asyncio.to_thread(invocations, json.dumps(body).encode(), CONTENT_TYPE_JSON, model, schema)
        except MlflowException as exc:
            return openai_error(exc.get_http_status_code(), exc.message, exc.error_code)
        if result.status != 200:
            return openai_error(result.status, result.response)
        return Response(content=result.response, status_code=200, media_type=CONTENT_TYPE_JSON)

    def newer(method: str, field: str):
        """The served model's `method`, or a refusal naming `field` for a version whose code predates it."""
        found = getattr(model.unwrap_python_model(), method, None)
        message = f"{field}: this version's code predates it; `foundry reregister` the version, or leave {field} out"
        return found, None if found else openai_error(400, message, "invalid_request", param=field)

    async def answered(body: dict):
        """A chat with `stop` or `logprobs`, answered whole by the served model's `answer_chat`."""
        answer_chat, refusal = newer("answer_chat", "stop" if body.get("stop") is not None else "logprobs")
        if refusal:
            return refusal
        body.pop("stream", None)
        try:
            return JSONResponse(await asyncio.to_thread(answer_chat, body))
        except MlflowException as exc:
            return openai_error(exc.get_http_status_code(), exc.message, exc.error_code)

    async def streamed(body: dict):
        """The reply as server-sent events, each token's text sent as it is generated (Starlette asks the iterator
        for each event in a thread, and asks no more once the client has gone); a refusal before any event."""
        stream_chat, refusal = newer("stream_chat", "stream")
        if refusal:
            return refusal
        include_usage = (body.pop("stream_options", None) or {}).get("include_usage", False)
        body.pop("stream")
        try:
            chunks = await asyncio.to_thread(stream_chat, body, include_usage)
        except MlflowException as exc:
            return openai_error(exc.get_http_status_code(), exc.message, exc.error_code)
        return StreamingResponse(server_sent_events(chunks), media_type="text/event-stream")

    async def completions(request: Request):
        try:
            body = completions_body(await request.body(), model_id)
        except BadBody as exc:
            return openai_error(400, str(exc), "invalid_request", param=exc.param)
        complete_text = getattr(model.unwrap_python_model(), "complete_text", None)
        if complete_text is None:
            message = (
                "prompt: this version's code predates /v1/completions; `foundry reregister` it, or use /invocations"
            )
            return openai_error(400, message, "invalid_request", param="prompt")
        include_usage = (body.pop("stream_options", None) or {}).get("include_usage", False)
        stream = body.pop("stream", False)
        try:  # a thread: checking and (not streamed) generating must not block the event loop
            answer = await asyncio.to_thread(complete_text, body, stream, include_usage)
        except MlflowException as exc:
            named = _NAMED_FIELD.match(exc.message)
            param = named.group(1) if named and named.group(1) in COMPLETION_FIELDS else None
            return openai_error(exc.get_http_status_code(), exc.message, exc.error_code, param=param)
        if stream:
            return StreamingResponse(server_sent_events(answer), media_type="text/event-stream")
        return JSONResponse(answer)

    async def models():
        return model_list(model_id, created)

    for path in CHAT_ROUTES:
        app.post(path)(chat_completions)
    for path in COMPLETION_ROUTES:
        app.post(path)(completions)
    for path in ("/v1/models", "/models"):
        app.get(path)(models)
    return app


def serve(
    model_uri: str,
    host: str,
    port: int,
    model_id: str | None = None,
    allow_remote: bool = False,
    max_batch_rows: int | None = None,
) -> None:
    """Load the version as `mlflow models serve` does (SERVING_MODEL_CONFIG honoured) and serve it until stopped,
    requests from all clients batched together, up to `max_batch_rows` rows."""
    import uvicorn
    from mlflow.pyfunc.scoring_server import load_model_with_mlflow_config

    check_host(host, allow_remote)
    app = build_app(load_model_with_mlflow_config(model_uri), model_id or model_uri, max_batch_rows)
    uvicorn.run(app, host=host, port=port, workers=1, log_level="info")
