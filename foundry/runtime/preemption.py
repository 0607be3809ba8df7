"""Preemption: SIGTERM, which SLURM, Kubernetes and systemd send before SIGKILL, ends training with a checkpoint.

`arm(grace_s)` makes the first SIGTERM a request (`requested()`) and starts the grace period
(`train.preempt_grace_s`); outside `training(folder)` there is nothing to save, and the process ends at once, as
`hard_exit` ends it. Training answers it after its next optimizer step, where its regular checkpoints are
written (`foundry.checkpointing.writer.CheckpointEvery`): every rank stops at the same step, writes the
checkpoint there as any other, and `Preempted` ends the fit naming it. A re-run resumes from it as from any
checkpoint, bitwise. Whatever still runs when the grace period ends is ended (`hard_exit`): this process's children
(the ranks, Prefect's temporary server) and then the process, without waiting for Prefect's own shutdown, whose
event worker alone held `foundry run` for more than 80 s. A command that cannot resume (`foundry reproduce`, `foundry
search`) arms it with what its re-run does instead (`arm(grace_s, rerun)`), which the exit says in place of a
checkpoint.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

log = logging.getLogger(__name__)

EXIT_CODE = 128 + signal.SIGTERM  # 143: the shell's code for a process SIGTERM ended
CHILDREN_GRACE_S = 2.0  # from SIGTERM to SIGKILL for the children left at a hard exit


class Preempted(Exception):
    """Training stopped on SIGTERM; `checkpoint`: the one a re-run resumes from (None: none written yet). `rerun`:
    what the same command does instead, where it cannot resume (`foundry reproduce` trains from scratch on purpose,
    a search's running trials start over); then no checkpoint is named (None: it resumes)."""

    def __init__(self, checkpoint: Path | None, step: int | None = None, rerun: str | None = None):
        self.checkpoint, self.step, self.rerun = checkpoint, step, rerun
        at = f" at step {step}" if step is not None else ""
        if rerun is not None:
            text = f"preempted (SIGTERM): stopped{at}; {rerun}"
        elif checkpoint is None:
            text = (
                "preempted (SIGTERM) before training wrote a checkpoint: the same command starts again (from the "
                "newest checkpoint an earlier run of it left, if any)"
            )
        else:
            text = (
                f"preempted (SIGTERM): training stopped{at}, checkpoint {checkpoint}; the same command resumes from it"
            )
        super().__init__(text)

    def __reduce__(self):  # pickled (Prefect keeps a failed task's exception) with its checkpoint, not its text
        return type(self), (self.checkpoint, self.step, self.rerun)


class _Request:
    """The first SIGTERM's time and the grace period it started; whether the entry point armed preemption and whether
    training runs; the folder whose newest checkpoint an exit names."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.grace_s = 60.0
        self.armed = False
        self.training = False
        self.timer: threading.Timer | None = None
        self.folder: Path | None = None
        self.rerun: str | None = None  # what a re-run does where it cannot resume (`arm`); None: it resumes
        self.lock = threading.RLock()  # a second SIGTERM may arrive while the first one's handler holds it


_REQUEST = _Request()


def arm(grace_s: float | None = None, rerun: str | None = None) -> None:
    """From now on SIGTERM to this process asks training to stop within `grace_s` seconds (None: as armed before,
    `rerun` included). `rerun`: what the same command does when re-run, for a command that cannot resume (None: it
    resumes from the checkpoint the exit names); a checkpoint it would not use is not named. The main thread only:
    elsewhere Python cannot install a handler, and the one installed stays."""
    if grace_s is not None:
        _REQUEST.grace_s, _REQUEST.rerun = grace_s, rerun
    _REQUEST.armed = True
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_sigterm)


def armed() -> bool:
    """Whether this process's entry point (`foundry run`, a rank) made SIGTERM a preemption; elsewhere (a Prefect
    deployment's run, a test) SIGTERM keeps the meaning its handlers give it."""
    return _REQUEST.armed


def on_sigterm(signum: int, frame) -> None:
    """The handler: no exception in the middle of a step, only the request (training looks at step boundaries);
    outside training, the exit."""
    request()
    if not _REQUEST.training:
        _exit_now("")


def request() -> None:
    """Preemption asked for: the first call starts the grace period, at whose end `hard_exit` runs."""
    with _REQUEST.lock:
        if _REQUEST.at is not None:
            return
        _REQUEST.at = time.monotonic()
        # The children get CHILDREN_GRACE_S of it at a hard exit, and the exit itself a little.
        _REQUEST.timer = threading.Timer(max(0.0, _REQUEST.grace_s - CHILDREN_GRACE_S - 0.5), _out_of_time)
        _REQUEST.timer.daemon = True
        _REQUEST.timer.start()
    if _REQUEST.training:  # os.write: a handler may run inside a write to stderr, which print would re-enter
        os.write(2, f"SIGTERM: stopping at the next step with a checkpoint, within {_REQUEST.grace_s:g} s\n".encode())


def requested() -> bool:
    return _REQUEST.at is not None


@contextmanager
def training(folder: Path) -> Iterator[None]:
    """While this process trains into `folder`: SIGTERM waits for training's checkpoint, and every exit names the
    newest in `folder`."""
    _REQUEST.folder, _REQUEST.training = folder, True
    try:
        yield
    finally:
        _REQUEST.training = False


def stopped() -> Preempted:
    """The preemption as it stands: the newest intact checkpoint of the folder `training` named, and its step; where
    the command cannot resume, what its re-run does instead."""
    if _REQUEST.folder is None:
        return Preempted(None, rerun=_REQUEST.rerun)
    from foundry.checkpointing.manifest import latest_valid

    newest = latest_valid(_REQUEST.folder)
    if _REQUEST.rerun is not None:
        return Preempted(None, newest.step if newest else None, _REQUEST.rerun)
    return Preempted(_REQUEST.folder / newest.file, newest.step) if newest else Preempted(None)


def rerun() -> str | None:
    """What the same command does when re-run, where it cannot resume (`arm`); None where it resumes."""
    return _REQUEST.rerun


def _out_of_time() -> None:
    _exit_now(f" (the grace period, {_REQUEST.grace_s:g} s, ran out first)")


def _exit_now(why: str) -> NoReturn:
    message = f"foundry: {stopped()}{why}"
    os.write(2, f"{message}\n".encode())  # os.write: this may run in a signal handler, inside another write
    log.warning(message)
    hard_exit()


def hard_exit(code: int = EXIT_CODE) -> NoReturn:
    """Flush the logs, end every process this one started (SIGTERM, then SIGKILL), and leave at once: no atexit
    handlers, so nothing of Prefect's shutdown (its event and log workers, its temporary server) can hold it."""
    import psutil

    log.warning("exiting with status %d after SIGTERM", code)
    for handler in logging.getLogger().handlers:
        handler.flush()
    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(children, timeout=CHILDREN_GRACE_S)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
