"""Operations: local servers (`foundry up`) and health (`foundry doctor`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from foundry.core.redact import redact_url
from foundry.runtime.env import TELEMETRY_OFF, foundry_home, mlflow_db_uri, package_versions, private
from foundry.runtime.log_retention import Retention, roll_over

BIN = Path(sys.executable).parent


@dataclass
class Server:
    name: str
    url: str
    health: str
    process: subprocess.Popen | None = None


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether `url` answers 200; a `user:password@` in it is sent as basic auth (urllib reads it as the host)."""
    from foundry.data.credentials import CredentialError, authorised

    try:
        address, auth = authorised(url, "the server")
        request = urllib.request.Request(address)
        for key, value in auth.items():
            request.add_unredirected_header(key, value)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError, CredentialError):
        return False


def wait_healthy(server: Server, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not answers(server.health):
        if server.process is not None and server.process.poll() is not None:
            raise RuntimeError(f"{server.name} server exited with code {server.process.returncode} before answering")
        if time.time() > deadline:
            raise TimeoutError(f"{server.name} server did not answer {server.health} within {timeout:.0f} s")
        time.sleep(0.5)


def start_prefect(port: int, home: Path, log: Path) -> Server:
    url = f"http://127.0.0.1:{port}"
    # The UI's pages call the API at this address (by default port 4200's, whatever port serves them).
    env = {**os.environ, **TELEMETRY_OFF, "PREFECT_HOME": str(home / "prefect"), "PREFECT_UI_API_URL": f"{url}/api"}
    env.pop("PREFECT_API_URL", None)  # the server must not try to talk to another server
    proc = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=open(log, "ab", opener=private),
        stderr=subprocess.STDOUT,
    )
    return Server("Prefect", url, f"{url}/api/health", proc)


def start_mlflow(port: int, home: Path, log: Path, artifacts: str | None = None) -> Server:
    """MLflow tracking server on the same SQLite store the embedded runs use; it serves artifacts."""
    (home / "mlflow").mkdir(parents=True, exist_ok=True)
    destination = artifacts or (home / "mlflow" / "served-artifacts").as_uri()
    proc = subprocess.Popen(
        [
            str(BIN / "mlflow"),
            "server",
            "--backend-store-uri",
            mlflow_db_uri(home),
            "--artifacts-destination",
            destination,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        # No job runner unless the user asks for one: it serves MLflow's GenAI jobs (online scoring, trace
        # archival), which Foundry never submits, and it is one more process importing all of MLflow at each
        # start, beside the server's two.
        env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ, **TELEMETRY_OFF},
        stdout=open(log, "ab", opener=private),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    return Server("MLflow", url, f"{url}/health", proc)


def up(prefect_port: int = 4200, mlflow_port: int = 5000, artifacts: str | None = None) -> list[Server]:
    """Start both servers, wait until they answer, return them (the caller owns the processes)."""
    home = foundry_home()
    logs = home / "logs"
    logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    for log in ("prefect-server.log", "mlflow-server.log"):
        roll_over(logs / log, Retention.from_env())
    servers = [
        start_prefect(prefect_port, home, logs / "prefect-server.log"),
        start_mlflow(mlflow_port, home, logs / "mlflow-server.log", artifacts),
    ]
    try:
        for server in servers:
            wait_healthy(server)
    except Exception:
        stop(servers)
        raise
    return servers


def stop(servers: list[Server]) -> None:
    for server in servers:
        if server.process is not None and server.process.poll() is None:
            server.process.terminate()
    for server in servers:
        if server.process is not None:
            try:
                server.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.process.kill()


def doctor() -> list[tuple[str, bool, str]]:
    """(check, ok, detail) rows: versions, backends and whether they answer, telemetry switches."""
    rows = [(f"package {name}", version != "absent", version) for name, version in package_versions().items()]
    home = foundry_home()
    rows.append(("FOUNDRY_HOME", True, str(home)))
    prefect_api = os.environ.get("PREFECT_API_URL")
    if prefect_api:
        rows.append(("Prefect API", answers(prefect_api.rstrip("/") + "/health"), redact_url(prefect_api)))
    else:
        rows.append(
            ("Prefect API", True, f"embedded: temporary server per run, database in {os.environ['PREFECT_HOME']}")
        )
    tracking = os.environ["MLFLOW_TRACKING_URI"]
    if tracking.startswith("http"):
        rows.append(("MLflow tracking", answers(tracking.rstrip("/") + "/health"), redact_url(tracking)))
    else:
        rows.append(
            ("MLflow tracking", Path(tracking.removeprefix("sqlite:///")).parent.is_dir(), redact_url(tracking))
        )
    return rows + telemetry_rows(home)


def telemetry_rows(home: Path) -> list[tuple[str, bool, str]]:
    """Whether each library would send usage data, as the library itself decides it (its own function or
    settings object, which also read its config files and profiles), not the variables Foundry sets."""
    import importlib.util

    from mlflow.telemetry.utils import is_telemetry_disabled
    from prefect.analytics import is_telemetry_enabled
    from prefect.settings import get_current_settings

    server_analytics = get_current_settings().server.analytics_enabled
    rows = [
        _off("telemetry MLflow", is_telemetry_disabled(), "mlflow.telemetry.utils.is_telemetry_disabled()"),
        _off("telemetry Prefect client", not is_telemetry_enabled(), "prefect.analytics.is_telemetry_enabled()"),
        _off(
            "telemetry Prefect server", not server_analytics, f"settings: server.analytics_enabled={server_analytics}"
        ),
        _off(
            "telemetry Great Expectations",
            importlib.util.find_spec("great_expectations.analytics") is None,
            "this version has no analytics module",
        ),
    ]
    return rows + dvc_rows(home / "workspace")


def _off(check: str, off: bool, source: str) -> tuple[str, bool, str]:
    return check, off, f"{'off' if off else 'ON'}: {source}"


def dvc_rows(workspace: Path) -> list[tuple[str, bool, str]]:
    """DVC's analytics as DVC decides them in the workspace (the variable, then `core.analytics` from its
    system, global, repo and local config), and the config alone: what a plain `dvc` command run there,
    without Foundry's environment, would do."""
    import tempfile
    from contextlib import chdir

    from dvc.analytics import is_enabled
    from dvc.config import Config, to_bool

    repo = workspace / ".dvc"
    where = f"config of {workspace}" if repo.is_dir() else "global and system config"
    configured = Config(dvc_dir=str(repo) if repo.is_dir() else None, validate=False)
    analytics = configured.get("core", {}).get("analytics", "true")
    with tempfile.TemporaryDirectory() as outside, chdir(workspace if repo.is_dir() else outside):
        enabled = is_enabled()  # it reads the config of the repo around the working directory, if any
    variable = os.environ.get("DVC_NO_ANALYTICS", "unset")
    rows = [_off("telemetry DVC", not enabled, f"dvc.analytics.is_enabled(): DVC_NO_ANALYTICS={variable}, {where}")]
    if repo.is_dir():
        rows.append(_off("telemetry DVC workspace config", not to_bool(analytics), f"core.analytics={analytics}"))
    return rows
