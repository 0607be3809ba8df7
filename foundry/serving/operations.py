"""`foundry serve-model`'s operations: requests from many clients batched together, `/metrics` in Prometheus' text
format and `/health` as JSON, installed on the app by `install`.

Batching: the served GPT gets a `models.batching.BatchingEngine`, which every generation of the served model goes
through (`models.generate.generated_steps`): chats, streams, completions and `/invocations` rows, from all clients,
run as one batch. Each request still waits in a thread of its own (`asyncio.to_thread`, Starlette's threads for a
stream), so the event loop's default pool is widened to `THREADS` at startup (asyncio's default, cores + 4, would let
only a handful of requests reach the engine at once). `mlflow models serve` has no engine: one request at a time.

`ServingMetrics` is ASGI middleware around the whole app: every request counted by route and status, its latency
(until the last byte of the answer: a stream's whole length) and its time to the first byte of the body (a stream's
first chunk) in histograms by route. The batching engine (models/batching.py) reports each generation's output tokens
and is read for the queue depth (requests waiting for a place in the batch) and the rows generating now.

Its own `CollectorRegistry`, never prometheus_client's global one: two apps in one process (the tests') count apart,
and importing this module registers nothing.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Latency of one request (s): from a few ms (a refusal, one token) to the minutes of a long stream under load.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Tokens one generation makes: up to the largest `max_new_tokens` a version takes, in powers of two.
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
THREADS = 128  # requests waiting in threads at once: well past the batch's rows, so that a queue forms for it
OTHER_ROUTE = "other"  # a path the app has no route for: one label, so that scanners cannot grow the series


class ServingMetrics:
    """ASGI middleware: each HTTP request counted (`foundry_requests_total{route, status}`), timed to its last byte
    (`foundry_request_seconds{route}`) and its first body byte (`foundry_first_byte_seconds{route}`). `routes` are
    the paths labelled as themselves; any other path is `other`."""

    def __init__(self, app, routes: set[str], registry: CollectorRegistry):
        self.app, self.routes = app, routes
        self.requests = Counter(
            "foundry_requests", "HTTP requests answered, by route and status", ["route", "status"], registry=registry
        )
        self.latency = Histogram(
            "foundry_request_seconds",
            "Seconds from a request's arrival to its answer's last byte (a stream's whole length)",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.first_byte = Histogram(
            "foundry_first_byte_seconds",
            "Seconds from a request's arrival to its answer's first body byte (a stream: its first chunk)",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge("foundry_requests_in_flight", "HTTP requests being answered now", registry=registry)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in self.routes else OTHER_ROUTE
        start, status, first = time.perf_counter(), 500, None  # 500: the app raised before it answered

        async def counted(message):
            nonlocal status, first
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and first is None and message.get("body"):
                first = time.perf_counter() - start
            await send(message)

        self.in_flight.inc()
        try:
            await self.app(scope, receive, counted)
        finally:
            self.in_flight.dec()
            self.requests.labels(route, str(status)).inc()
            self.latency.labels(route).observe(time.perf_counter() - start)
            if first is not None:
                self.first_byte.labels(route).observe(first)


class EngineMetrics:
    """The batching engine's side: `foundry_generated_tokens` (a histogram of each generation's output tokens, and
    their total), `foundry_queue_depth`, `foundry_batch_rows` (generating now), `foundry_batch_steps` and
    `foundry_batch_row_steps`, read from the engine when scraped."""

    def __init__(self, engine, registry: CollectorRegistry):
        self.tokens = Histogram(
            "foundry_generated_tokens",
            "Tokens each generation made (one request's rows together; a request with stop strings, each prompt)",
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        queue = Gauge("foundry_queue_depth", "Generations waiting for a place in the running batch", registry=registry)
        queue.set_function(lambda: engine.waiting)
        rows = Gauge("foundry_batch_rows", "Rows being generated together now", registry=registry)
        rows.set_function(lambda: engine.running_rows)
        engine.on_finished = self.tokens.observe
        for name, what, read in (
            ("foundry_batch_steps", "Batched steps run (one forward each)", lambda: engine.forwards),
            (
                "foundry_batch_row_steps",
                "Rows those steps extended, over all (/ steps: the mean batch)",
                lambda: engine.rows_stepped,
            ),
        ):
            Gauge(name, what, registry=registry).set_function(read)


def metrics_text(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The registry's samples in Prometheus' text format, and that format's Content-Type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


class Threads:
    """ASGI middleware: at the app's startup, the event loop's default thread pool widened to `threads`."""

    def __init__(self, app, threads: int):
        self.app, self.threads = app, threads

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            loop = asyncio.get_running_loop()
            loop.set_default_executor(ThreadPoolExecutor(self.threads, thread_name_prefix="foundry-request"))
        return await self.app(scope, receive, send)


def health(model, model_id: str, engine) -> tuple[int, dict]:
    """`/health`'s status and body: 200 once the version is loaded (the server listens only after loading it),
    with the model's id and, when it batches, the queue and the rows generating; 503 without a model."""
    if model is None:
        return 503, {"status": "unavailable", "model_loaded": False, "model": model_id}
    body = {"status": "ok", "model_loaded": True, "model": model_id}
    if engine is not None:
        body |= {"queue_depth": engine.waiting, "batch_rows": engine.running_rows, "max_batch_rows": engine.max_rows}
    return 200, body


def batching_engine(model, max_rows: int, window_s: float):
    """A `BatchingEngine` attached to the served GPT (`models.generate.BATCHING`), or None for a model without
    one (an image classifier)."""
    from models.batching import BatchingEngine
    from models.generate import BATCHING
    from models.gpt import GPT

    gpt = getattr(model.unwrap_python_model(), "model", None)
    if not isinstance(gpt, GPT):
        return None
    engine = BatchingEngine(gpt, max_rows, window_s)
    setattr(gpt, BATCHING, engine)
    return engine


def install(app, model, model_id: str, routes: set[str], max_rows: int, window_s: float):
    """Batching (`max_rows`, `window_s`: `models.batching`), `/metrics`, `/health` (MLflow's own, a bare 200,
    replaced) and the metrics middleware, outermost (call it after adding other middleware, so that their
    answers are counted too); returns the engine, if the model batches."""
    from fastapi.responses import JSONResponse, Response

    registry = CollectorRegistry()
    engine = batching_engine(model, max_rows, window_s)
    if engine is not None:
        EngineMetrics(engine, registry)
    app.router.routes[:] = [route for route in app.router.routes if getattr(route, "path", None) != "/health"]

    async def metrics():
        text, content_type = metrics_text(registry)
        return Response(content=text, media_type=content_type)

    async def healthy():
        status, body = health(model, model_id, engine)
        return JSONResponse(body, status_code=status)

    app.get("/metrics")(metrics)
    app.get("/health")(healthy)
    labelled = routes | {"/metrics", "/health", "/ping", "/version"}
    app.add_middleware(ServingMetrics, routes=labelled, registry=registry)
    app.add_middleware(Threads, threads=THREADS)
    return engine
