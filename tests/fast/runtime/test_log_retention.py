"""`$FOUNDRY_HOME/logs/` stays bounded (#55, point 9): a real `foundry` process removes the logs past their age,
then the oldest past the folder's size, before it writes its own; a server's log rolls over at `foundry up`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from foundry.runtime.log_retention import DAY_S, MIB, Retention, prune, roll_over

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)


def aged(path: Path, days: float, size: int = 1000) -> Path:
    path.write_bytes(b"x" * size)
    when = time.time() - days * DAY_S
    os.utime(path, (when, when))
    return path


def foundry(*args: str, **env: str) -> subprocess.CompletedProcess:
    """A real `foundry` process: only one sets up its log file."""
    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **env}
    for name in ("MLFLOW_TRACKING_URI", "PREFECT_HOME", "PREFECT_API_URL"):  # the test's home, not the session's
        environ.pop(name, None)
    command = [sys.executable, "-m", "foundry.cli", *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=environ, capture_output=True, text=True)


def test_a_command_removes_old_logs_then_the_oldest_past_the_size_bound(tmp_path):
    logs = Path(os.environ["FOUNDRY_HOME"]) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ancient = aged(logs / "run-20250101-000000-1.log", days=45)
    older, newer = aged(logs / "prepare-1.log", 3, 700 * 1024), aged(logs / "prepare-2.log", 2, 700 * 1024)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("one document\n")
    source = ["--set", f"data.source={tmp_path / 'src'}", "--out", str(tmp_path / "m.json")]

    done = foundry("acquire", "--config", "configs/tiny.yaml", *source, FOUNDRY_LOG_KEEP_MB="1")
    assert done.returncode == 0, done.stderr
    assert not ancient.exists()  # past 30 days
    assert not older.exists() and newer.exists()  # 1.4 MiB in a 1 MiB bound: the oldest goes
    assert len(list(logs.glob("acquire-*.log"))) == 1  # its own, written after


@pytest.mark.parametrize("value", ["0", "-3", "soon", "inf"])
def test_a_bound_that_bounds_nothing_is_refused_by_name(value, monkeypatch):
    monkeypatch.setenv("FOUNDRY_LOG_KEEP_DAYS", value)
    with pytest.raises(ValueError, match=f"^FOUNDRY_LOG_KEEP_DAYS={value!r}: expected a positive number$"):
        Retention.from_env()


def test_a_command_given_a_bound_that_bounds_nothing_exits_2_naming_it():
    done = foundry("acquire", "--config", "configs/tiny.yaml", FOUNDRY_LOG_KEEP_DAYS="soon")
    assert done.returncode == 2 and "FOUNDRY_LOG_KEEP_DAYS='soon': expected a positive number" in done.stderr


def test_one_log_rolls_over_at_its_share_of_the_bound(tmp_path):
    retention = Retention(keep_days=30, keep_bytes=8 * MIB)
    server = aged(tmp_path / "prefect-server.log", 0, retention.file_bytes + 1)
    roll_over(server, retention)
    assert not server.exists() and (tmp_path / "prefect-server.log.1").stat().st_size == retention.file_bytes + 1
    small = aged(tmp_path / "mlflow-server.log", 0, 10)
    roll_over(small, retention)
    assert small.exists()


def test_the_age_bound_is_the_operators(tmp_path):
    kept, gone = aged(tmp_path / "a.log", 4), aged(tmp_path / "b.log.1", 6)
    assert prune(tmp_path, Retention(keep_days=5)) == [gone] and kept.exists()
