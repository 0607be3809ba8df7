"""`foundry serve-model`: a registered version over HTTP, MLflow's scoring routes and the OpenAI ones
(foundry/serving/http.py). No Prefect."""

from __future__ import annotations

import argparse

from foundry.cli.common import model_uri
from foundry.config import ConfigError


def cmd_serve_model(args: argparse.Namespace) -> int:
    from foundry.serving import http

    uri = str(model_uri(args.model_uri))
    try:  # before loading the model: a refused host costs nothing
        http.check_host(args.host, args.allow_remote)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    _refuse_purged(uri, args.allow_purged)
    base = f"http://{args.host}:{args.port}"
    print(
        f"serving {uri} on {base}: /invocations as `mlflow models serve`; OpenAI clients use base_url {base}/v1 "
        f"(model {args.model_name or uri}). Ctrl-C stops it.",
        flush=True,
    )
    http.serve(uri, args.host, args.port, args.model_name, args.allow_remote)
    return 0


def _refuse_purged(uri: str, allowed: bool) -> None:
    """A version a purge tagged is served only when the user says so (`--allow-purged`)."""
    from foundry.registry.versions import refuse_purged, resolve

    if allowed:
        return
    version = resolve(uri)  # what the alias names now; a registry that cannot be read stops it (fail closed)
    hint = "; to serve it anyway (it was kept with `purge --apply --keep-models`), pass --allow-purged"
    refuse_purged(version, "served", hint)


def add_commands(commands) -> None:
    from foundry.serving.http import DEFAULT_PORT, REMOTE_FLAG

    serve = commands.add_parser(
        "serve-model",
        help="serve a registered version over HTTP: /invocations as `mlflow models serve`, and /v1/chat/completions "
        "and /v1/models for OpenAI clients",
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
        "--allow-purged",
        action="store_true",
        help="serve a version tagged `foundry.purge` (trained on documents a purge removed; refused by default): "
        "for a version kept with `foundry purge --apply --keep-models`",
    )
    serve.set_defaults(func=cmd_serve_model)
