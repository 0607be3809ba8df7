"""$FOUNDRY_HOME is its owner's alone (issue #55, point 5): the home created 0700; DVC's config and site-cache
folders, Prefect's, MLflow's and the logs' 0700 (DVC made its site cache 0777 without the sticky bit); logs and the
embedded databases 0600 (they were 0644). Real `foundry` processes on a new home, as in
tests/fast/cli/test_cli_errors.py.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT

# What Prefect's temporary server does first on a new home: its engine opens its database, which SQLite creates
# (with the process's umask) where Prefect's settings put it; in a child configured as Foundry configures it. The
# migrations that follow (13 s of this test on 2 cores) only fill the file: they change neither its place nor its mode.
MAKE_PREFECT_DB = (
    "import asyncio\n"
    "from foundry.runtime.env import configure_environment\n"
    "configure_environment()\n"
    "from sqlalchemy import text\n"
    "from prefect.server.database import provide_database_interface\n"
    "async def open_database():\n"
    "    async with provide_database_interface().session_context() as session:\n"
    "        await session.execute(text('select 1'))\n"
    "asyncio.run(open_database())\n"
)
PRIVATE = ("mlflow", "prefect", "logs", "dvc-config", "dvc-config/site-cache", "dvc-config/site-cache/repo")


def foundry(home: Path, *args: str, script: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL")}
    env = {k: v for k, v in env.items() if not k.startswith(("PREFECT_", "DVC_"))} | {"FOUNDRY_HOME": str(home)}
    command = [sys.executable, "-c", script] if script else [sys.executable, "-m", "foundry.cli", *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def shared(home: Path) -> list[str]:
    """Everything under `home` that its group or other users may write."""
    return sorted(f"{oct(mode(p))} {p.relative_to(home)}" for p in home.rglob("*") if mode(p) & 0o022)


def test_a_new_home_is_its_owners_alone(tmp_path):
    home = tmp_path / "home"
    assert foundry(home, script=MAKE_PREFECT_DB).returncode == 0
    # DVC opens its site cache (and fails: the version is in no remote); MLflow opens its store
    remote = tmp_path / "remote"
    remote.mkdir()
    assert foundry(home, "hydrate", "0123456789abcdef0123456789abcdef", "--remote", str(remote)).returncode == 1
    gc = foundry(home, "gc")
    assert gc.returncode == 0, gc.stderr[-2000:]
    assert mode(home) == 0o700
    assert shared(home) == []
    assert {folder: oct(mode(home / folder)) for folder in PRIVATE} == {folder: "0o700" for folder in PRIVATE}
    assert any((home / "dvc-config" / "site-cache" / "repo").iterdir())  # DVC did use it
    files = [home / "mlflow" / "mlflow.db", home / "prefect" / "prefect.db", *(home / "logs").glob("*.log")]
    assert len(files) >= 3 and {f.name: oct(mode(f)) for f in files} == {f.name: "0o600" for f in files}


def test_an_older_homes_shared_folders_and_databases_are_made_private(tmp_path):
    """A home an older Foundry left: its next command takes back what DVC and SQLite opened up."""
    home = tmp_path / "home"
    for folder in PRIVATE:
        (home / folder).mkdir(parents=True)
        (home / folder).chmod(0o777)
    for database in ("mlflow/mlflow.db", "prefect/prefect.db", "prefect/prefect.db-wal"):
        (home / database).write_bytes(b"")
        (home / database).chmod(0o644)
    assert foundry(home, "config").returncode == 0
    assert shared(home) == []
    assert {str(p.relative_to(home)): oct(mode(p)) for p in home.rglob("*") if p.is_file()} == {
        "mlflow/mlflow.db": "0o600",
        "prefect/prefect.db": "0o600",
        "prefect/prefect.db-wal": "0o600",
    }
