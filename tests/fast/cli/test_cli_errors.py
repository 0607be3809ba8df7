"""A failed `foundry` command ends stderr with its one paragraph; tracebacks go to $FOUNDRY_HOME/logs/ (#30 point 8).

Real `foundry` processes (`python -m foundry.cli`): only a process of its own sets up the console this way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT

# A command that logs an error with its traceback (as Prefect does for a failed task), then fails.
LOGS_AND_FAILS = """
import logging, sys
import foundry.cli.data as data

def failing(args):
    try:
        raise ValueError("inner detail")
    except ValueError:
        logging.getLogger("foundry.stage").error("the stage logged its error", exc_info=True)
    raise RuntimeError("the stage broke")

data.cmd_acquire = failing
sys.argv = ["foundry", *sys.argv[1:]]
from foundry.cli import main
sys.exit(main())
"""


def foundry(tmp_path: Path, *args: str, script: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "FOUNDRY_HOME": str(tmp_path / "home")}
    for name in ("MLFLOW_TRACKING_URI", "PREFECT_HOME", "PREFECT_API_URL"):  # the new home's, not the session's
        env.pop(name, None)
    command = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "foundry.cli", *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def test_logged_tracebacks_go_to_the_log_file_and_the_failure_comes_last(tmp_path):
    done = foundry(tmp_path, "acquire", script=LOGS_AND_FAILS)
    assert done.returncode == 1
    assert last_line(done.stderr) == "foundry: acquire failed (RuntimeError): the stage broke"
    assert "the stage logged its error" in done.stderr and "Traceback" not in done.stderr
    (log,) = (tmp_path / "home" / "logs").glob("acquire-*.log")
    assert "ValueError: inner detail" in log.read_text()


def test_verbose_keeps_tracebacks_on_the_console(tmp_path):
    done = foundry(tmp_path, "acquire", "--verbose", script=LOGS_AND_FAILS)
    assert "ValueError: inner detail" in done.stderr
    assert last_line(done.stderr).startswith("foundry: acquire failed")
