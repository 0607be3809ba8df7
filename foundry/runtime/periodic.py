"""Doing something every few seconds while a stage runs: following the ranks' logs, reporting progress."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def every(seconds: float, action: Callable[[], None]) -> Iterator[None]:
    """`action` every `seconds` in a background thread while the body runs; the thread is joined on exit.
    It runs in a copy of this context: Prefect's run (which a log record belongs to) and client live there."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            action()

    thread = threading.Thread(target=contextvars.copy_context().run, args=(loop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
