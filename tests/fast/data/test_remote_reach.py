"""A DVC remote that does not answer (#56 point 5): asked again with backoff, then a clear error naming it;
a remote that answers, even with a refusal, goes on to the pull. The whole `foundry hydrate` against an S3
endpoint nobody listens on: tests/slow/data/test_versioning_end_to_end.py."""

from __future__ import annotations

import socket
import time

import pytest

from foundry.data.remote_reach import RemoteUnreachable, wait_for_remote


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free again once closed: nothing listens there


def test_an_s3_endpoint_nobody_listens_on_is_asked_with_backoff_then_named(monkeypatch, caplog):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    started = time.monotonic()
    with pytest.raises(RemoteUnreachable, match=r"the DVC remote s3://bucket/dvc did not answer 3 times over 0 s"):
        wait_for_remote("s3://bucket/dvc", backoff_s=(0.1, 0.3))
    assert 0.4 <= time.monotonic() - started < 20
    assert [r.getMessage().rsplit("asking again in ", 1)[1] for r in caplog.records] == ["0 s", "0 s"]


def test_a_folder_remote_that_is_gone_is_named(tmp_path):
    with pytest.raises(RemoteUnreachable, match=f"no folder {tmp_path / 'gone'}"):
        wait_for_remote(str(tmp_path / "gone"), backoff_s=(0.01,))
    wait_for_remote(str(tmp_path))  # there: at once, no wait


def test_a_remote_that_answers_with_a_refusal_is_the_pulls_to_report(monkeypatch):
    """An HTTP server that answers every request 403: an answer, so no retry and no wait."""
    import http.server
    import threading

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(403)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        started = time.monotonic()
        wait_for_remote("s3://bucket/dvc", backoff_s=(30.0,))
        assert time.monotonic() - started < 10
    finally:
        server.shutdown()
