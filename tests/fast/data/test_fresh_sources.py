"""Remote sources stay fresh: http(s) files asked again (ETag, Last-Modified, or length and digest), transient
errors retried with backoff, and what the origin said recorded. S3: tests/slow/data/test_fresh_sources_s3.py."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import POLL
from helpers_sources import SHORT_BACKOFF, tar_gz

from foundry.config import DataConfig
from foundry.data.acquire import SourceError, list_source_files

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)


class Origin(http.server.BaseHTTPRequestHandler):
    """Serves `files` (name -> bytes) with the validators `mode` asks for, and `failures` (name -> list of
    status codes, or 0 for a dropped connection) before the real answer. Every answer is logged."""

    files: dict[str, bytes] = {}
    failures: dict[str, list[int]] = {}
    mode = "etag"  # etag | none
    answers: list[tuple[str, int]] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        name = self.path.lstrip("/")
        pending = self.failures.get(name, [])
        if pending:
            status = pending.pop(0)
            self.answers.append((name, status))
            if status == 0:  # a reset: the connection ends before any answer
                self.connection.shutdown(2)
                return
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if name not in self.files:
            self.answers.append((name, 404))
            self.send_error(404)
            return
        body = self.files[name]
        etag = '"' + hashlib.md5(body).hexdigest() + '"'
        if self.mode == "etag" and self.headers.get("If-None-Match") == etag:
            self.answers.append((name, 304))
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            return
        self.answers.append((name, 200))
        self.send_response(200)
        if self.mode == "etag":
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def origin():
    """An http server on 127.0.0.1 whose answers the test controls; yields (handler class, base URL)."""
    handler = type("TestOrigin", (Origin,), {"files": {}, "failures": {}, "answers": [], "mode": "etag"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True)
    thread.start()
    try:
        yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def read_one(url: str, **kw):
    files, _ = list_source_files(DataConfig(source=url, **{**SHORT_BACKOFF, **kw}))
    (entry,) = files
    return entry, Path(entry.path).read_bytes()


def test_a_changed_file_with_an_etag_is_fetched_again_and_an_unchanged_one_is_not(origin):
    handler, base = origin
    handler.files["doc.txt"] = b"first version\n"
    entry, body = read_one(f"{base}/doc.txt")
    assert body == b"first version\n"
    assert entry.origin == f"{base}/doc.txt" and entry.etag.startswith('"') and entry.checked_at
    stamp = Path(entry.path).stat().st_mtime_ns

    again, body = read_one(f"{base}/doc.txt")
    assert handler.answers[-1] == ("doc.txt", 304) and body == b"first version\n"
    assert Path(again.path).stat().st_mtime_ns == stamp  # not rewritten
    assert again.checked_at >= entry.checked_at

    handler.files["doc.txt"] = b"second version, longer\n"
    changed, body = read_one(f"{base}/doc.txt")
    assert body == b"second version, longer\n" and handler.answers[-1] == ("doc.txt", 200)
    assert changed.sha256 == hashlib.sha256(body).hexdigest() and changed.etag != entry.etag


def test_without_validators_length_and_digest_decide(origin):
    handler, base = origin
    handler.mode = "none"
    handler.files["doc.txt"] = b"aaaa\n"
    entry, _ = read_one(f"{base}/doc.txt")
    assert entry.etag == "" and entry.last_modified == ""
    stamp = Path(entry.path).stat().st_mtime_ns
    same, _ = read_one(f"{base}/doc.txt")
    assert Path(same.path).stat().st_mtime_ns == stamp  # same bytes: the copy is left alone
    handler.files["doc.txt"] = b"bbbb\n"  # same length, other content
    changed, body = read_one(f"{base}/doc.txt")
    assert body == b"bbbb\n" and changed.sha256 != entry.sha256


def test_last_modified_from_a_plain_http_server(http_folder):
    """`python -m http.server` sends Last-Modified and answers If-Modified-Since, and no ETag."""
    folder, base = http_folder
    doc = folder / "doc.txt"
    doc.write_text("old\n")
    os.utime(doc, (time.time() - 100, time.time() - 100))
    entry, _ = read_one(f"{base}/doc.txt")
    assert entry.last_modified and entry.etag == ""
    doc.write_text("new text\n")
    changed, body = read_one(f"{base}/doc.txt")
    assert body == b"new text\n" and changed.last_modified != entry.last_modified


def test_transient_errors_are_retried_with_backoff(origin):
    handler, base = origin
    handler.files["doc.txt"] = b"arrives in the end\n"
    handler.failures["doc.txt"] = [503, 0, 429, 502]
    _, body = read_one(f"{base}/doc.txt", fetch_retries=4)
    assert body == b"arrives in the end\n"
    assert [status for _, status in handler.answers] == [503, 0, 429, 502, 200]


def test_a_source_that_stays_unreachable_is_a_clear_error_and_leaves_nothing_behind(origin, home):
    handler, base = origin
    handler.failures["doc.txt"] = [503] * 10
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"cannot download .*/doc.txt: HTTP 503.*unreachable after 3 attempts"):
        read_one(f"{base}/doc.txt", fetch_retries=2, fetch_backoff_s=0.2)
    assert time.monotonic() - started >= 0.2 + 0.4  # it waited, doubling
    assert len(handler.answers) == 3
    assert not [p for p in (home / "sources").rglob("doc.txt*")]


def test_a_file_removed_at_the_origin_is_removed_from_the_copy(origin, home):
    handler, base = origin
    handler.files["doc.txt"] = b"here for now\n"
    entry, _ = read_one(f"{base}/doc.txt")
    del handler.files["doc.txt"]
    with pytest.raises(SourceError, match="HTTP 404"):
        read_one(f"{base}/doc.txt")
    assert not Path(entry.path).exists()


def test_a_changed_archive_is_extracted_again(origin):

    handler, base = origin
    handler.files["c.tar.gz"] = tar_gz({"c/a.txt": "one", "c/b.txt": "two"})
    files, _ = list_source_files(DataConfig(source=f"{base}/c.tar.gz", **SHORT_BACKOFF))
    assert [f.name for f in files] == ["c/a.txt", "c/b.txt"] and files[0].origin == f"{base}/c.tar.gz"
    handler.files["c.tar.gz"] = tar_gz({"c/a.txt": "one, edited"})
    files, _ = list_source_files(DataConfig(source=f"{base}/c.tar.gz", **SHORT_BACKOFF))
    assert [(f.name, Path(f.path).read_text()) for f in files] == [("c/a.txt", "one, edited")]
