"""The local servers `foundry up` starts and stops: Prefect's and MLflow's, each waited on until it answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from foundry.runtime.env import TELEMETRY_OFF, foundry_home, mlflow_db_uri, private
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


# Where the server keeps the leases of concurrency slots (a deployment's one-at-a-time slot, the promotion lock's):
# Prefect's default keeps them in the server's memory, so a server that restarts has forgotten every lease while the
# database still counts its slots taken. The holder's release then finds no lease and frees nothing: the slot stays
# taken for good (every later promotion of that model waits), and the flow engine's next renewal of a deployment
# run's lease (every 225 s) is refused, which stops that run. On files under PREFECT_HOME they outlive a restart
# (tests/slow/ops/test_prefect_leases.py, tests/slow/ops/test_prefect_server_lost.py).
LEASE_STORAGE = "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE"
FILE_LEASES = "prefect.server.concurrency.lease_storage.filesystem"


def start_prefect(port: int, home: Path, log: Path) -> Server:
    """Prefect's server on `home`'s database, its concurrency leases kept on files (unless the environment
    names another lease storage)."""
    url = f"http://127.0.0.1:{port}"
    # The UI's pages call the API at this address (by default port 4200's, whatever port serves them).
    env = {
        LEASE_STORAGE: FILE_LEASES,
        **os.environ,
        **TELEMETRY_OFF,
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_UI_API_URL": f"{url}/api",
    }
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
