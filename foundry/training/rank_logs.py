"""The ranks' output, line by line, through this process's logging while they run.

The elastic agent writes each rank's stdout and stderr to `<log_dir>/<launch>_<random>/attempt_<n>/<rank>/`.
Its tee would copy them onto this process's stdout and stderr, which a Prefect task run's logger never sees.
Where logging is set up, the tee stays off and `forwarded` follows the files instead: each new line goes to
the `foundry.training.ranks` logger (under `foundry`, one of Prefect's extra loggers, so it reaches the task
run's logs and the console, once), a rank's traceback at ERROR and the rest at INFO.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from foundry.runtime.periodic import every

log = logging.getLogger("foundry.training.ranks")

# Between the tracebacks of chained exceptions.
CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
ATTEMPT = re.compile(r"attempt_(\d+)$")


@dataclass
class Followed:
    """One rank's stdout or stderr file: how far it was read, the unfinished last line, and whether a
    traceback is being printed."""

    rank: str
    prefix: str
    offset: int = 0
    partial: bytes = b""
    in_traceback: bool = False

    def level(self, line: str) -> int:
        """ERROR from `Traceback (most recent call last):` to the exception's own line that ends it."""
        if line.startswith(("Traceback (most recent call last)", *CHAINED)):
            self.in_traceback = True
            return logging.ERROR
        if not self.in_traceback:
            return logging.INFO
        if line and not line[0].isspace() and not line.startswith(CHAINED):
            self.in_traceback = False  # "SomeError: message", the last line
        return logging.ERROR


def followed(path: Path) -> Followed:
    """Prefixed `[rank1]: `, as the agent's tee wrote it; `[rank1, restart 2]: ` for the ranks of a restart."""
    rank, attempt = path.parent.name, int(ATTEMPT.match(path.parent.parent.name).group(1))
    return Followed(rank, f"[rank{rank}]: " if attempt == 0 else f"[rank{rank}, restart {attempt}]: ")


class RankLogs:
    """Follows the output files of the launch `launch_id` under `log_dir` (an earlier launch's stay unread)."""

    def __init__(self, log_dir: Path, launch_id: str):
        self.log_dir, self.launch_id = log_dir, launch_id
        self.files: dict[Path, Followed] = {}

    def poll(self, final: bool = False) -> None:
        """Log every line written since the last poll; `final`: the unfinished last lines too."""
        for path in sorted(self.log_dir.glob(f"{self.launch_id}_*/attempt_*/*/std*.log")):
            if path not in self.files:
                self.files[path] = followed(path)
            file = self.files[path]
            try:
                with open(path, "rb") as fh:
                    fh.seek(file.offset)
                    chunk = fh.read()
            except OSError:  # gone between the listing and here: nothing more to read from it
                continue
            file.offset += len(chunk)
            *lines, file.partial = (file.partial + chunk).split(b"\n")
            if final and file.partial:
                lines, file.partial = [*lines, file.partial], b""
            for raw in lines:
                # torch's excepthook in a rank prefixes a traceback's lines with the rank already
                line = raw.decode("utf-8", errors="replace").rstrip("\r").removeprefix(f"[rank{file.rank}]: ")
                log.log(file.level(line), "%s%s", file.prefix, line)


@contextmanager
def forwarded(log_dir: Path, launch_id: str, every_s: float = 0.2) -> Iterator[None]:
    """The ranks' lines logged every `every_s` seconds while the body runs, and the rest when it ends."""
    follower = RankLogs(log_dir, launch_id)
    try:
        with every(every_s, follower.poll):
            yield
    finally:
        follower.poll(final=True)
