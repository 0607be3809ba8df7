"""How long `$FOUNDRY_HOME/logs/` keeps what it holds: every command leaves a log there, so without a bound it
grows for as long as the home is used.

Each command, when it opens its own log, first removes the logs older than `FOUNDRY_LOG_KEEP_DAYS` days
(default 30), then the oldest ones until the folder holds at most `FOUNDRY_LOG_KEEP_MB` MiB (default 512). One
command's log rolls over at an eighth of that (its three latest parts kept), and `foundry up` rolls a server's
log over when it starts, so no single file outgrows the bound either. The log being written is never removed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from foundry.runtime.env import positive_setting

DAY_S = 86400
MIB = 1 << 20


@dataclass(frozen=True)
class Retention:
    keep_days: float = 30.0
    keep_bytes: int = 512 << 20

    @property
    def file_bytes(self) -> int:
        """Where one log rolls over: a share of the folder's bound, so one command cannot fill it alone."""
        return max(self.keep_bytes // 8, 1 << 20)

    @classmethod
    def from_env(cls) -> Retention:
        """The operator's bounds (`FOUNDRY_LOG_KEEP_DAYS`, `FOUNDRY_LOG_KEEP_MB`); a value that is not a positive
        number is an error naming the variable, not a folder that grows."""
        days = positive_setting("FOUNDRY_LOG_KEEP_DAYS", cls.keep_days)
        return cls(days, int(positive_setting("FOUNDRY_LOG_KEEP_MB", cls.keep_bytes / MIB) * MIB))


def prune(folder: Path, retention: Retention, now: float | None = None) -> list[Path]:
    """Remove the logs past the age bound, then the oldest until the folder is within its size bound; the
    files removed. Files that vanish meanwhile (another command pruning) are skipped."""
    now = time.time() if now is None else now
    logs = []
    for path in folder.glob("*.log*"):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        if path.is_file():
            logs.append((stat.st_mtime, stat.st_size, path))
    logs.sort()
    removed, total = [], sum(size for _, size, _ in logs)
    for mtime, size, path in logs:
        if now - mtime > retention.keep_days * DAY_S or total > retention.keep_bytes:
            path.unlink(missing_ok=True)
            removed.append(path)
            total -= size
    return removed


def roll_over(log: Path, retention: Retention) -> None:
    """Before a server appends to `log` again: past its share of the bound, it becomes `log.1`."""
    if log.is_file() and log.stat().st_size > retention.file_bytes:
        os.replace(log, log.with_name(f"{log.name}.1"))
