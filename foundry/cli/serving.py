"""`foundry serve-model`: a registered version over HTTP, MLflow's scoring routes and the OpenAI ones
(foundry/serving/http.py). No Prefect."""

from __future__ import annotations

import argparse

from foundry.cli.common import allow_purged_arg, model_uri, refuse_purged
from foundry.config import ConfigError


def cmd_serve_model(args: argparse.Namespace) -> int:
    from foundry.serving import http

    uri = str(model_uri(args.model_uri))
    try:  # before loading the model: a refused host costs nothing
        http.check_host(args.host, args.allow_remote)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if args.max_batch_rows is not None and args.max_batch_rows < 1:
        raise ConfigError(f"--max-batch-rows {args.max_batch_rows}: the batch needs room for 1 row or more")
    refuse_purged([uri], args.allow_purged, "served")
    base = f"http://{args.host}:{args.port}"
    print(
        f"serving {uri} on {base}: /invocations as `mlflow models serve`; OpenAI clients use base_url {base}/v1 "
        f"(model {args.model_name or uri}). Ctrl-C stops it.",
        flush=True,
    )
    http.serve(uri, args.host, args.port, args.model_name, args.allow_remote, args.max_batch_rows)
    return 0


def add_commands(commands) -> None:
    from foundry.serving.http import DEFAULT_PORT, REMOTE_FLAG

    serve = commands.add_parser(
        "serve-model",
        help="serve a registered version over HTTP: /invocations as `mlflow models serve`, and /v1/chat/completions "
        "(streamed with stream: true), /v1/completions and /v1/models for OpenAI clients",
    )
    serve.add_argument("model_uri", help="models:/NAME/VERSION or models:/NAME@ALIAS")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; loopback only)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument(
        "--model-name", help="the model's id in /v1/models and in answers to requests that name none (default: the URI)"
    )
    serve.add_argument(
        REMOTE_FLAG,
        action="store_true",
        help="allow a --host that is not loopback: there is no authentication, anyone who reaches it can generate",
    )
    serve.add_argument(
        "--max-batch-rows",
        type=int,
        help="rows generated together at most, over all clients' requests (default 32; 1: one row at a time)",
    )
    allow_purged_arg(serve, "serve")
    serve.set_defaults(func=cmd_serve_model)
