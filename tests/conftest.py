"""Test session wiring: a throwaway $FOUNDRY_HOME and embedded backends, set before Foundry loads."""

import os
import tempfile
from pathlib import Path

import pytest

# Hermetic: never talk to a server or a home the developer configured.
for _var in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "PREFECT_HOME", "FOUNDRY_HOME"):
    os.environ.pop(_var, None)
SESSION_HOME = Path(tempfile.mkdtemp(prefix="foundry-test-home-"))
os.environ["FOUNDRY_HOME"] = str(SESSION_HOME)

import foundry  # noqa: E402,F401  (applies the environment above)

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def foundry_home() -> Path:
    return SESSION_HOME


@pytest.fixture(scope="session")
def prefect_harness():
    """A real Prefect API server on 127.0.0.1 with a temporary database, for whole-flow tests."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield
