"""What a `foundry` command prints on stderr: log lines without tracebacks, and the failure last.

A failed run printed 74 to 177 lines and two to five Prefect tracebacks before the one paragraph that says
what went wrong, and Prefect's temporary server announced its shutdown after it. Here every log record also
goes, tracebacks included, to a file under `$FOUNDRY_HOME/logs/`; the console shows the same lines without
their tracebacks (unless `--verbose`), and once a command has failed nothing more reaches the console, so
the `foundry: ... failed` paragraph is the last thing on stderr.

Only a real `foundry` process does this (`main()` without arguments): tests that call `main([...])` keep
their process's logging as it was.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import time
import traceback
from pathlib import Path

from foundry.core.redact import redact_text
from foundry.runtime.env import foundry_home, private
from foundry.runtime.log_retention import Retention, prune

# Loggers Prefect's logging config gives console handlers of their own (the rest reach the root's).
CONSOLE_LOGGERS = ("", "uvicorn", "fastapi", "prefect._internal")
FILE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s [%(process)d %(threadName)s] %(message)s"


class _PrivateFile(logging.handlers.RotatingFileHandler):
    """A log file its owner alone reads (0600): it quotes configs, paths and tracebacks. It rolls over at its
    share of the logs folder's bound (`foundry.runtime.log_retention`), keeping its three latest parts."""

    def _open(self):
        return open(self.baseFilename, self.mode, encoding=self.encoding, errors=self.errors, opener=private)


class _WithoutTraceback(logging.Formatter):
    """Another formatter's line, without the record's traceback or stack (they go to the log file)."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def _consoles() -> list[tuple[logging.Logger, logging.Handler]]:
    return [
        (logger, handler)
        for logger in map(logging.getLogger, CONSOLE_LOGGERS)
        for handler in logger.handlers
        if isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and getattr(handler, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    ]


def log_to_file(command: str, verbose: bool) -> Path:
    """Send every log record to a new file under `$FOUNDRY_HOME/logs/` (created on its first line) and, unless
    `verbose`, keep tracebacks off the console. Prefect's logging is set up first: set up later, it would
    leave a root logger that already has a handler without its console."""
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()

    folder = foundry_home() / "logs"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    retention = Retention.from_env()
    prune(folder, retention)
    path = folder / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    to_file = _PrivateFile(path, maxBytes=retention.file_bytes, backupCount=3, encoding="utf-8", delay=True)
    to_file.setFormatter(logging.Formatter(FILE_FORMAT))
    for name in CONSOLE_LOGGERS:
        logging.getLogger(name).addHandler(to_file)
    # Its first line, whatever the command logs after: a command that logs nothing still leaves its log.
    to_file.handle(_record(logging.INFO, f"foundry {command} started in {os.getcwd()}"))
    if not verbose:
        for handler in {id(h): h for _, h in _consoles()}.values():  # one handler may serve several loggers
            if not isinstance(handler.formatter, _WithoutTraceback):
                handler.setFormatter(_WithoutTraceback(handler.formatter or logging.Formatter()))
    return path


def _record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("foundry.cli", level, __file__, 0, message, None, None)


def log_failure(path: Path, message: str, exc: BaseException) -> None:
    """A failed command's message and traceback, into its log file only (the console gets the message once,
    last). Prefect logs a failed flow's traceback itself; a command without a flow (acquire, prepare) would
    otherwise leave it nowhere. The traceback is redacted as the message is: an exception may quote a URL."""
    trace = redact_text("".join(traceback.format_exception(exc)))
    record = _record(logging.ERROR, f"{message}\n{trace}".rstrip())
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.baseFilename == str(path.absolute()):
            handler.handle(record)


def quiet_console() -> None:
    """After a failure: what is logged from now on (Prefect stopping its temporary server at exit, say) goes
    to the log file only, so the failure stays the last thing on stderr."""
    for logger, handler in _consoles():
        logger.removeHandler(handler)
