"""Publication against a real MLflow tracking server that fails: transient errors are retried, and a server
stopped mid-publication leaves no version that looks registered. A loopback proxy in front of the server
marks the known points: it forwards every request, and the test decides what happens at one of them."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
import torch
from conftest import POLL, tracking_uri

from foundry.ops import servers as ops
from foundry.registry import versions
from foundry.runtime import tracking
from foundry.serving.package import log_model
from models.gpt import GPT, GPTConfig

ALIAS = "/api/2.0/mlflow/registered-models/alias"
GET_MODEL = "/api/2.0/mlflow/registered-models/get"


class Proxy(http.server.ThreadingHTTPServer):
    """Forwards to `target`; `before(method, path, body)` may answer instead (a status code), `after(method,
    path, status)` runs once the server has answered, before the answer is passed on."""

    def __init__(self, target: str):
        super().__init__(("127.0.0.1", 0), Forward)
        self.target = target
        self.before: Callable[[str, str, bytes], int | None] = lambda method, path, body: None
        self.after: Callable[[str, str, int], None] = lambda method, path, status: None
        self.seen: list[tuple[str, str, int]] = []


class Forward(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _forward(self):
        path = self.path.split("?")[0]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        status = self.server.before(self.command, path, body)
        payload, headers = b"", {}
        if status is None:
            skip = {"host", "connection", "content-length", "transfer-encoding"}
            request = urllib.request.Request(
                self.server.target + self.path,
                data=body or None,
                method=self.command,
                headers={k: v for k, v in self.headers.items() if k.lower() not in skip},
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    status, headers, payload = answer.status, dict(answer.headers), answer.read()
            except urllib.error.HTTPError as answer:
                status, headers, payload = answer.code, dict(answer.headers), answer.read()
            except OSError:
                status = 502  # the server is not there
        self.server.seen.append((self.command, path, status))
        self.server.after(self.command, path, status)  # before the client hears the answer: nothing slips in
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward


@pytest.fixture
def server(mlflow_server):
    """The session's MLflow server (tests/conftest.py `mlflow_server`), running: (state, running, store). A test
    may stop it; the next one to ask for it gets it started again on the same port and store."""
    _, running, _ = mlflow_server
    running()
    return mlflow_server


@pytest.fixture
def proxy(server, monkeypatch):
    state, _, _ = server
    front = Proxy(state["server"].url)
    threading.Thread(target=front.serve_forever, kwargs=POLL, daemon=True).start()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    try:
        with tracking_uri(monkeypatch, f"http://127.0.0.1:{front.server_address[1]}"):
            yield front
    finally:
        front.shutdown()
        front.server_close()


@pytest.fixture
def logged(proxy, tiny_config, tiny_dataset, tmp_path):
    """A pipeline run on the server with a (random, tiny) model logged to it: what registration starts from."""
    import json

    vocab = json.loads((tiny_dataset / "manifest.json").read_text())["vocab_size"]
    model = GPT(GPTConfig(vocab_size=vocab, **tiny_config.model.model_dump()))
    checkpoint = tmp_path / "model.pt"
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, checkpoint)
    run_id = tracking.start_pipeline_run(tiny_config, run_name="server-test")
    return run_id, log_model(run_id, checkpoint, tiny_dataset / "tokenizer.json")


def names(versions_found) -> list[str]:
    return sorted(str(v.version) for v in versions_found)


def test_transient_errors_of_the_tracking_server_are_retried(proxy, logged):
    run_id, uri = logged
    failures = [503, 503]  # the first two alias settings meet a 503, as from an overloaded server

    def before(method, path, body):
        return failures.pop(0) if method == "POST" and path == ALIAS and failures else None

    proxy.before = before
    outcome = versions.publish(uri, "srv-retry", run_id, {}, True, "no champion yet")
    assert outcome.promoted and [s for m, p, s in proxy.seen if (m, p) == ("POST", ALIAS)] == [503, 503, 200, 200]


def test_a_failed_alias_gives_back_the_aliases_taken_and_deletes_the_version(proxy, logged):
    """The champion alias keeps failing (past the retries) after the challenger alias was set: the challenger
    alias goes back to the version it replaced and the new version is deleted."""
    from mlflow.exceptions import MlflowException

    run_id, uri = logged
    first = versions.publish(uri, "srv-undo", run_id, {}, True, "no champion yet")
    proxy.before = lambda method, path, body: 503 if path == ALIAS and b'"champion"' in body else None
    with pytest.raises(MlflowException, match="503"):
        versions.publish(uri, "srv-undo", run_id, {}, True, "beats the champion")
    proxy.before = lambda method, path, body: None
    assert names(tracking.client().search_model_versions("name='srv-undo'")) == [first.version]
    assert str(versions.alias("srv-undo", "challenger").version) == first.version
    assert str(versions.champion("srv-undo").version) == first.version


def test_a_server_stopped_mid_publication_leaves_no_version_that_looks_registered(server, proxy, logged):
    """Stopped right after the new version took the `challenger` alias, before `champion`: nothing can be
    undone then. The version stays marked pending and not promoted, and the next judging of the model
    withdraws it, giving `challenger` back to the version it replaced."""
    from mlflow.exceptions import MlflowException

    state, running, _ = server
    run_id, uri = logged
    first = versions.publish(uri, "srv-mid", run_id, {}, True, "no champion yet")

    down = threading.Event()

    def stop_after_challenger(method, path, status):
        if (method, path) == ("POST", ALIAS):
            ops.stop([state["server"]])
            down.set()

    proxy.after = stop_after_challenger
    proxy.before = lambda method, path, body: 502 if down.is_set() else None  # gone: nothing answers
    with pytest.raises(versions.PublicationFailed, match="srv-mid/2 could not take its aliases"):
        versions.publish(uri, "srv-mid", run_id, {}, True, "beats the champion")
    with pytest.raises(MlflowException):  # down: an error, never "no champion"
        versions.champion("srv-mid")
    proxy.after = lambda method, path, status: None
    proxy.before = lambda method, path, body: None
    running()  # the server is back
    left = tracking.client().get_model_version("srv-mid", "2")
    assert left.tags["foundry.publication"] == "pending" and left.tags["gate.promoted"] == "false"
    assert str(versions.champion("srv-mid").version) == first.version
    assert str(versions.alias("srv-mid", "challenger").version) == "2"  # taken before the server went
    assert versions.recover("srv-mid") == ["2"]
    assert names(tracking.client().search_model_versions("name='srv-mid'")) == ["1"]
    assert str(versions.alias("srv-mid", "challenger").version) == "1"


# Last in the module: it leaves the server stopped, and starting it again (seconds) is paid only by a later user.
def test_a_server_stopped_just_before_registration_leaves_nothing(server, proxy, logged):
    state, _, store = server
    run_id, uri = logged

    down = threading.Event()

    def stop_first(method, path, body):
        if path == GET_MODEL and not down.is_set():  # registration's first call
            ops.stop([state["server"]])
            down.set()
        return 502 if down.is_set() else None  # gone: nothing answers

    proxy.before = stop_first
    with pytest.raises(Exception, match="502"):
        versions.publish(uri, "srv-before", run_id, {}, True, "no champion yet")
    assert store.search_model_versions("name='srv-before'") == []  # the server's own store
