"""The whole pipeline on a source behind basic auth (#30): it trains and registers, and the password is in no file
it leaves (MLflow's database and artifacts, model.pt, the DVC workspace and remote, the source mirror, Prefect's
database) and on no line it prints."""

from __future__ import annotations

import base64
import http.server
import sysconfig
import tarfile
import threading
from pathlib import Path

from conftest import REPO_ROOT

PASSWORD = "s3cr3t-flow-pw"


class BasicAuth(http.server.BaseHTTPRequestHandler):
    """Serves `files` to a client that sends reader:PASSWORD as basic auth, 401 to any other."""

    files: dict[str, bytes] = {}
    seen: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        expected = "Basic " + base64.b64encode(f"reader:{PASSWORD}".encode()).decode()
        self.seen.append(self.headers.get("Authorization", "") == expected)
        body = self.files.get(self.path.lstrip("/")) if self.seen[-1] else None
        self.send_response(200 if body is not None else 401)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")


def holding(roots: list[Path], secret: bytes) -> list[str]:
    files = [p for root in roots for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()]
    return [str(p) for p in files if secret in p.read_bytes()]


def test_a_private_source_leaves_its_password_nowhere(prefect_harness, foundry_home, tmp_path, capfd, monkeypatch):
    from prefect.settings import PREFECT_API_DATABASE_CONNECTION_URL

    from flows.train_pipeline import train_pipeline
    from foundry.config import load_config

    archive = tmp_path / "email.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(Path(sysconfig.get_paths()["stdlib"]) / "email", arcname="email")
    handler = type("Private", (BasicAuth,), {"files": {"email.tar.gz": archive.read_bytes()}, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # no netrc of the developer's
    monkeypatch.delenv("NETRC", raising=False)
    source = f"http://reader:{PASSWORD}@127.0.0.1:{server.server_address[1]}/email.tar.gz"
    try:
        config = load_config(
            REPO_ROOT / "configs" / "tiny.yaml",
            [f"data.source={source}", "registry.model_name=cred-gpt", "train.max_steps=10"],
        )
        result = train_pipeline(config=config)
    finally:
        server.shutdown()
        server.server_close()
    prefect_db = Path(PREFECT_API_DATABASE_CONNECTION_URL.value().split("///", 1)[1])
    printed = capfd.readouterr()
    assert result.model_version and any(handler.seen)  # trained on what the private server sent
    leaks = holding([foundry_home, prefect_db.parent], PASSWORD.encode())
    assert (leaks, PASSWORD in printed.out + printed.err) == ([], False)
