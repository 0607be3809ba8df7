"""`foundry`: the command line, one module per domain. Heavy libraries are imported inside each command, so
`--help` is instant.

- common: --config/--set, loading the config, MODEL_URI arguments, the training flows' summary
- console: log lines without tracebacks on stderr, the whole log in a file, the failure last
- pipeline: run, retrain, reproduce
- data: acquire, prepare (the DVC stages), hydrate
- registry: promote, reregister, lineage
- ops: up, serve, doctor, plan, deployments
- config: config (--explain, --defaults, --write)
- search: search
- specialists: finetune, merge
- align: align, instructions
- export: export (transformers and llama.cpp formats)
- evaluate: evaluate (registered versions scored on any data, compared)
- gc: gc (what nothing references, listed and sized; deleted with --apply)
- purge: purge (every copy of a document and every version trained on it; a dry run without --apply)
- serving: serve-model (a version over HTTP, OpenAI's chat-completions and completions routes too, streamed)
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from foundry.cli import (
    align,
    config,
    console,
    data,
    evaluate,
    export,
    gc,
    ops,
    pipeline,
    purge,
    registry,
    search,
    serving,
    specialists,
)
from foundry.config import ConfigError
from foundry.core.redact import redact_text
from foundry.runtime import preemption
from foundry.runtime.env import configure_environment

DOMAINS = (
    pipeline,
    ops,
    data,
    registry,
    config,
    align,
    search,
    specialists,
    export,
    serving,
    evaluate,
    gc,
    purge,
)
LIGHT = {"config", "serve-model"}  # commands that never start Prefect: no log file, no Prefect import
VERBOSE = "print tracebacks on the console too (they always go to the log file under $FOUNDRY_HOME/logs/)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foundry",
        description="Raw text to a trained, validated, registered model.",
        epilog="State lives under $FOUNDRY_HOME (default ./.foundry). Set MLFLOW_TRACKING_URI or "
        "PREFECT_API_URL to use servers instead of the embedded defaults.",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help=VERBOSE)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for domain in DOMAINS:
        domain.add_commands(commands)
    for command in commands.choices.values():  # `foundry run --verbose` too; SUPPRESS keeps a global one
        command.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS, help=VERBOSE)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The `foundry` command. Called without `argv` it is the process itself: its log goes to a file and its
    console carries no tracebacks (`foundry.cli.console`); with `argv` (tests) logging is left as it is."""
    args = build_parser().parse_args(argv)
    configure_environment()
    standalone = argv is None
    try:
        log_file = console.log_to_file(args.command, args.verbose) if standalone and args.command not in LIGHT else None
    except ValueError as exc:  # FOUNDRY_LOG_KEEP_DAYS or _MB set to something that bounds nothing
        print(f"foundry: {exc}", file=sys.stderr)
        return 2
    code, message = _run(args, log_file)
    if preemption.requested():  # SIGTERM: say where training stopped, then leave without Prefect's shutdown
        code, message = preemption.EXIT_CODE, f"foundry: {preemption.stopped()}"
    if message:
        if standalone:
            console.quiet_console()
        if log_file is not None and log_file.exists():
            print(f"(the whole log, tracebacks included: {log_file})", file=sys.stderr)
        print(message, file=sys.stderr)  # one paragraph for people, and the last thing on stderr
    if standalone and preemption.requested():
        logging.getLogger("foundry.cli").warning(message)
        preemption.hard_exit(code)
    return code


def _run(args: argparse.Namespace, log_file: Path | None = None) -> tuple[int, str]:
    """The command's exit status, and the message that explains a failure ("" when none), which goes with its
    traceback to `log_file` too."""
    try:
        return args.func(args), ""
    except KeyboardInterrupt as exc:
        code, message, failure = 130, "foundry: interrupted", exc
    except ConfigError as exc:
        code, message, failure = 2, f"foundry: {redact_text(str(exc))}", exc
    except Exception as exc:  # the traceback is in the log file (and on the console with --verbose)
        kind = type(exc).__name__  # a library's message may quote a URL with its password (MLflow's does)
        code, message, failure = 1, f"foundry: {args.command} failed ({kind}): {redact_text(str(exc))}", exc
    except BaseException as exc:  # Prefect's TerminationSignal: SIGTERM came before training took the signal over
        if not preemption.requested():  # SystemExit and the like
            raise
        code, message, failure = preemption.EXIT_CODE, f"foundry: {args.command} stopped by SIGTERM", exc
    if log_file is not None:
        console.log_failure(log_file, message, failure)
    return code, message
