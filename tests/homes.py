"""Fresh $FOUNDRY_HOMEs for the slow lane's CLI processes, with their Prefect database already made, and new
MLflow stores already migrated.

The first Prefect server a home sees creates its database by running every migration (about 8 s on 2 cores),
and several slow tests each start from a home of their own. `seeded_home` copies in one database that Prefect
made once per session, in a child process configured the way Foundry configures its own: the same schema the
server would have made, so the server finds nothing to migrate. Tests about a home's very first start (two runs
racing on a fresh home, tests/slow/pipeline/test_concurrency.py) do not use it.

MLflow does the same on each new SQLite store: every migration, about 4 s on 2 cores, which the fast lane's
fixtures paid once per store of their own (a dozen). `seeded_mlflow_store` copies in one store that MLflow's own
`_initialize_tables` migrated once per test process; the store that opens the copy then finds its tables and adds
its default experiment, as on a new file."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DATABASE = "prefect.db"  # Prefect's default file under $PREFECT_HOME, which Foundry sets to $FOUNDRY_HOME/prefect
_MAKE = (
    "import asyncio\n"
    "from foundry.runtime.env import configure_environment\n"
    "configure_environment()\n"
    "from prefect.server.database import provide_database_interface\n"
    "asyncio.run(provide_database_interface().create_db())\n"
)


@functools.cache
def prefect_database() -> Path:
    """The session's migrated, empty Prefect database (made on first use)."""
    home = Path(tempfile.mkdtemp(prefix="foundry-template-home-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")} | {"FOUNDRY_HOME": str(home)}
    made = subprocess.run([sys.executable, "-c", _MAKE], env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    database = home / "prefect" / DATABASE
    assert database.is_file() and not database.with_name(DATABASE + "-wal").exists(), sorted(database.parent.iterdir())
    return database


def seeded_home(home: Path) -> Path:
    """`home`, new, holding a copy of the session's Prefect database where Foundry's Prefect will look for it."""
    (home / "prefect").mkdir(parents=True)
    shutil.copyfile(prefect_database(), home / "prefect" / DATABASE)
    return home


@functools.cache
def mlflow_database() -> Path:
    """This process's migrated, empty MLflow store (made on first use): MLflow's tables, no experiment yet."""
    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine_with_retry

    database = Path(tempfile.mkdtemp(prefix="foundry-template-mlflow-")) / "mlflow.db"
    engine = create_sqlalchemy_engine_with_retry(f"sqlite:///{database}")  # as a store makes its engine
    try:
        _initialize_tables(engine)  # what a tracking or registry store runs when it finds no tables
    finally:
        engine.dispose()
    return database


def seeded_mlflow_store(database: Path) -> str:
    """`database`, new, a copy of this process's migrated MLflow store; returns its tracking URI."""
    database.parent.mkdir(parents=True, exist_ok=True)
    if database.exists():
        raise FileExistsError(f"{database} exists: a seeded store is a new one; give it a path of its own")
    shutil.copyfile(mlflow_database(), database)
    return f"sqlite:///{database}"


def remove_template_home() -> None:
    """The home `prefect_database` made and the folder of `mlflow_database`, where this session made them."""
    if prefect_database.cache_info().currsize:
        shutil.rmtree(prefect_database().parents[1], ignore_errors=True)
    if mlflow_database.cache_info().currsize:
        shutil.rmtree(mlflow_database().parent, ignore_errors=True)
