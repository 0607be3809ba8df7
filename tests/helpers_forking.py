"""A forked child's exit at SIGTERM, forked from a process that raises at SIGTERM as a Prefect flow's does."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator


class Terminated(Exception):
    pass


def _raise_terminated(*_) -> None:
    raise Terminated


@contextlib.contextmanager
def raising_at_sigterm() -> Iterator[None]:
    """This process raises at SIGTERM within the block, as a Prefect flow's does (its TerminationSignal)."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _set_up_then_terminated(set_up: Callable[[], None]) -> None:
    set_up()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)


def exit_code_at_sigterm(set_up: Callable[[], None]) -> int:
    """The exit code of a child forked from a process that raises at SIGTERM, set up by `set_up`, then sent SIGTERM."""
    with raising_at_sigterm():
        child = multiprocessing.get_context("fork").Process(target=_set_up_then_terminated, args=(set_up,))
        child.start()
    child.join(timeout=30)
    return child.exitcode
