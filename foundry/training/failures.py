"""What a failed multi-rank launch reports: the rank that failed first, how, and the end of its traceback.

The elastic agent's own choice (`ChildFailedError.get_first_failure`) compares timestamps in whole seconds,
and stamps a rank that died without an error file (killed by a signal) when it notices, up to a monitor
interval later. A peer of a killed rank fails within milliseconds (its collective loses the connection)
and writes an error file, often in the same second: by the agent's order the peer would be blamed.
So the order here is by the error file's own time, and a rank that died without one counts from a second
before it was noticed; a rank stopped by SIGTERM (the agent's stop signal) is a consequence, named last.
"""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

TRACEBACK_LINES = 25


class TrainingFailed(RuntimeError):
    """A training rank failed; the message names the one that failed first, with its traceback when it left one."""


def how(exitcode: int) -> str:
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def has_error_file(failure: ProcessFailure) -> bool:
    return os.path.isfile(failure.error_file)


def _failed_at(failure: ProcessFailure) -> float:
    """When the rank failed, as far as can be told (see the module's docstring)."""
    if has_error_file(failure):
        return os.stat(failure.error_file).st_mtime  # written when the exception reached `@record`
    if failure.exitcode in (-signal.SIGTERM, 128 + signal.SIGTERM):  # stopped by the agent (a rank's SIGTERM
        return math.inf  # handler exits 143: `foundry.runtime.preemption`), after the failure that made it stop them
    return failure.timestamp - 1


def first_failure(failures: dict[int, ProcessFailure]) -> int:
    """The global rank that failed first: the root cause; its peers' errors follow from it."""
    return min(failures, key=lambda rank: (_failed_at(failures[rank]), rank))


def _recorded(failure: ProcessFailure) -> tuple[str, str]:
    """(exception, traceback) as the rank's `@record` wrote them; ('', '') when it wrote nothing."""
    if not has_error_file(failure):
        return "", ""
    message = failure.error_file_data.get("message", "")
    if isinstance(message, dict):  # {"message": "Type: text", "extraInfo": {"py_callstack": ...}}
        return message.get("message", ""), message.get("extraInfo", {}).get("py_callstack", "")
    return str(message), ""


def traceback_tail(failure: ProcessFailure, lines: int = TRACEBACK_LINES) -> str:
    """The last lines of the traceback the rank wrote to its error file; '' when it wrote none."""
    return "\n".join(_recorded(failure)[1].rstrip().splitlines()[-lines:])


def describe(failures: dict[int, ProcessFailure], n_ranks: int, log_dir: Path) -> str:
    """'training rank R of N exited with code C', its traceback, what became of the others, where the logs are."""
    first = first_failure(failures)
    root = failures[first]
    exception = _recorded(root)[0]
    outcome = how(root.exitcode)
    if exception and root.exitcode < 0:  # it raised, and the agent's stop signal reached it while it was exiting
        outcome = f"failed and then {outcome}"
    parts = [f"training rank {first} of {n_ranks} {outcome}" + (f": {exception}" if exception else "")]
    tail = traceback_tail(root)
    if tail:
        parts.append("\n" + tail)
    others = [f"rank {rank} {how(failures[rank].exitcode)}" for rank in sorted(failures) if rank != first]
    if others:
        parts.append(f"\nthen {', '.join(others)}")
    # An error file is <log_dir>/<launch>/attempt_<n>/<rank>/error.json: name this launch's folder if one is known.
    written = [Path(f.error_file) for f in failures.values() if has_error_file(f)]
    logs = written[0].parent.parent if written else log_dir
    parts.append(f"\nrank logs: {logs}")
    return "".join(parts)
