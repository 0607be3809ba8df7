"""Credentials never stored (#30): URLs redacted wherever config or sources are logged, saved or shown; an http
source behind basic auth read with the URL's userinfo or a netrc file, the password written nowhere."""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
from pathlib import Path

import pytest
from conftest import POLL

from foundry.cli import main
from foundry.config import DataConfig, FoundryConfig, to_yaml
from foundry.core.redact import redact_text, redact_url
from foundry.data.acquire import SourceError, acquire_source

PASSWORD = "s3cr3t-pw"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:s3cr3t@host:8080/data/file.txt", "http://user:***@host:8080/data/file.txt"),
        ("https://ghp_token123@github.com/org/repo/raw/a.txt", "https://***@github.com/org/repo/raw/a.txt"),
        ("postgresql+psycopg2://optuna:pw@db:5432/studies", "postgresql+psycopg2://optuna:***@db:5432/studies"),
        (
            "https://b.s3.amazonaws.com/k.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20240101"
            "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600&X-Amz-Security-Token=FQo&X-Amz-Signature=abc123",
            "https://b.s3.amazonaws.com/k.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***"
            "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600&X-Amz-Security-Token=***&X-Amz-Signature=***",
        ),
        (
            "https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&se=2030-01-01&sp=r&sig=abc%2Bdef%3D",
            "https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&se=2030-01-01&sp=r&sig=***",
        ),
    ],
)
def test_credentials_in_urls_are_masked(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/a%2Fb.txt?page=2&sort=asc#top",
        "s3://bucket/prefix/",
        "postgresql://optuna@db/studies",
        "sqlite:////tmp/x.db",
        "stdlib://email",
        "/data/corpus/*.txt",
    ],
)
def test_urls_without_credentials_are_unchanged(url):
    assert redact_url(url) == url


def test_urls_in_a_message_are_masked():
    message = "API request to http://admin:hunter2@mlflow:5000/api/2.0/runs failed (see https://x/f?sig=q)."
    assert (
        redact_text(message)
        == "API request to http://admin:***@mlflow:5000/api/2.0/runs failed (see https://x/f?sig=***)."
    )


class BasicAuth(http.server.BaseHTTPRequestHandler):
    """Serves `files` to a client that sends `user`:`password` as basic auth, 401 to any other."""

    files: dict[str, bytes] = {}
    user, password = "reader", PASSWORD
    seen: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        expected = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        self.seen.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="corpus"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.files[self.path.lstrip("/")]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def private(tmp_path, monkeypatch):
    """A corpus behind basic auth on 127.0.0.1; yields (host:port, home). No netrc of the developer's is read."""
    home = tmp_path / "home"
    monkeypatch.setenv("FOUNDRY_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("NETRC", raising=False)
    for name in [name for name in os.environ if name.startswith("FOUNDRY_CREDENTIAL_")]:
        monkeypatch.delenv(name)  # URLs kept by earlier tests (a port may come round again)
    handler = type("Private", (BasicAuth,), {"files": {"corpus.txt": b"a private document " * 20}, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", home
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def files_holding(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_source_behind_basic_auth_is_read_and_its_password_stored_nowhere(private, tmp_path):
    host, home = private
    config = FoundryConfig(data=DataConfig(source=f"http://reader:{PASSWORD}@{host}/corpus.txt", fetch_backoff_s=0.01))
    manifest = acquire_source(config.data, tmp_path / "source_manifest.json")
    assert manifest.files == 1 and manifest.source == f"http://reader:***@{host}/corpus.txt"
    assert (home / "sources").is_dir()
    stored = [*files_holding(home, PASSWORD), *files_holding(tmp_path / "source_manifest.json", PASSWORD)]
    shown = [json.dumps(config.flat()), to_yaml(config), config.model_dump_json()]
    assert (stored, [PASSWORD in text for text in shown]) == ([], [False, False, False])


def test_foundry_config_writes_no_password(private, tmp_path):
    host, _ = private
    written = tmp_path / "config.yaml"
    url = f"http://reader:{PASSWORD}@{host}/corpus.txt"
    assert main(["config", "--defaults", "--set", f"data.source={url}", "--write", str(written)]) == 0
    assert PASSWORD not in written.read_text() and f"reader:***@{host}" in written.read_text()


def test_a_netrc_file_supplies_the_password_of_a_redacted_url(private, tmp_path, monkeypatch):
    """The config that travels (params.yaml, a registered version's) holds `user:***@`: a process that was
    not given the URL reads the password from a netrc file."""
    host, home = private
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login reader password {PASSWORD}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    data = DataConfig(source=f"http://reader:***@{host}/corpus.txt", fetch_backoff_s=0.01)
    assert acquire_source(data, tmp_path / "m.json").files == 1


def test_a_redacted_url_without_its_credential_says_so(private, tmp_path):
    host, _ = private
    data = DataConfig(source=f"http://someone:***@{host}/corpus.txt", fetch_backoff_s=0.01)
    with pytest.raises(SourceError, match=r"someone:\*\*\*@.*redacted.*netrc"):
        acquire_source(data, tmp_path / "m.json")


def test_a_database_password_stays_out_of_the_config_and_reaches_the_storage():
    from foundry.config.search import SearchConfig
    from foundry.search.study import open_storage

    search = SearchConfig(storage=f"postgresql://optuna:{PASSWORD}@db:5432/studies", n_trials=1)
    assert search.storage == "postgresql://optuna:***@db:5432/studies"
    assert open_storage(search.storage) == f"postgresql://optuna:{PASSWORD}@db:5432/studies"


def test_a_password_in_the_tracking_uri_becomes_mlflow_basic_auth(monkeypatch):
    """MLflow's own messages quote its URI (and Prefect stores them with a failed run): the password leaves it."""
    from mlflow import MlflowClient

    from foundry.runtime.env import _tracking_credentials

    served = []

    class Tracking(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            served.append(self.headers.get("Authorization", ""))
            body = b'{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such experiment"}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tracking)
    threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True).start()
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.setenv(name, "")  # restored (removed) after the test
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://admin:{PASSWORD}@127.0.0.1:{server.server_address[1]}")
    try:
        _tracking_credentials()
        uri = os.environ["MLFLOW_TRACKING_URI"]
        assert MlflowClient(tracking_uri=uri).get_experiment_by_name("none") is None
    finally:
        server.shutdown()
        server.server_close()
    token = base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    assert (uri, served) == (f"http://127.0.0.1:{server.server_address[1]}", [f"Basic {token}"])


@pytest.mark.parametrize(
    "remote",
    ["https://user:pw@dvc.example.org/store", "s3://bucket/store?X-Amz-Signature=abc&X-Amz-Credential=k"],
)
def test_a_dvc_remote_with_a_credential_is_refused_naming_where_credentials_go(remote):
    from foundry.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"data.remote.*holds a credential.*dvc remote modify --local") as refused:
        load_config(None, [f"data.remote={remote}"])
    assert "pw" not in str(refused.value) and "abc" not in str(refused.value)
