"""A remote source's mirror stays locked from its fetch until its last file is hashed (#30 point 8): a second
acquire of the same source, which would fetch it again and re-extract it (delete and rewrite the copy), waits,
so the manifest hashes every file as the origin served it at one moment. The origin is a real http server on
127.0.0.1; the first acquire is held still at its first hash by a gate around the real `sha256_file`."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import serving
from helpers_sources import SHORT_BACKOFF, tar_gz

import foundry.data.acquire as acquire
from foundry.config import DataConfig
from foundry.data.acquire import list_source_files, mirror_of
from foundry.data.remote import locked

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)

FIRST = {"c/a.txt": "first version of a", "c/b.txt": "first version of b"}
SECOND = {"c/a.txt": "second version of a, longer", "c/b.txt": "second version of b, longer"}
WAIT_S = 2  # how long the second acquire is given to get past the lock while the first holds it


def publish(www: Path, members: dict[str, str], age_s: int) -> None:
    """The archive as the origin serves it, dated `age_s` ago (the server answers If-Modified-Since by date)."""
    path = www / "c.tar.gz"
    path.write_bytes(tar_gz(members))
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))


def digests(members: dict[str, str]) -> dict[str, str]:
    return {name: hashlib.sha256(text.encode()).hexdigest() for name, text in members.items()}


class Acquire(threading.Thread):
    """`list_source_files` in a thread of its own: its files' {name: sha256}, or the error it raised."""

    def __init__(self, name: str, cfg: DataConfig) -> None:
        super().__init__(name=name, daemon=True)
        self.cfg, self.result, self.error = cfg, None, None

    def run(self) -> None:
        try:
            self.result = {f.name: f.sha256 for f in list_source_files(self.cfg)[0]}
        except Exception as exc:  # handed to the test, which names it
            self.error = exc


@pytest.fixture(scope="module")
def race(tmp_path_factory):
    """The first acquire (thread "first") stopped at its first hash; the origin then changes and a second
    acquire starts and is given WAIT_S to finish; then the first goes on. Run once for the three tests that
    each check one outcome of it, in a home of its own. Returns (first, second, whether the second was still
    waiting when the first went on)."""
    root = tmp_path_factory.mktemp("race")
    with pytest.MonkeyPatch.context() as monkeypatch, serving(root / "www") as (www, base):
        monkeypatch.setenv("FOUNDRY_HOME", str(root / "home"))
        publish(www, FIRST, age_s=100)
        cfg = DataConfig(source=f"{base}/c.tar.gz", **SHORT_BACKOFF)
        hashing, resume, real = threading.Event(), threading.Event(), acquire.sha256_file

        def gated(path):
            if threading.current_thread().name == "first" and not hashing.is_set():
                hashing.set()
                assert resume.wait(60), "the test never let the first acquire go on"
            return real(path)

        monkeypatch.setattr(acquire, "sha256_file", gated)
        first, second = Acquire("first", cfg), Acquire("second", cfg)
        first.start()
        assert hashing.wait(60), f"the first acquire never hashed a file: {first.error!r}"
        publish(www, SECOND, age_s=10)
        second.start()
        second.join(WAIT_S)
        waited = second.is_alive()
        resume.set()
        for thread in (first, second):
            thread.join(60)
            assert thread.error is None and thread.result is not None, f"{thread.name}: {thread.error!r}"
    return first.result, second.result, waited


def test_a_second_acquire_of_the_source_waits_while_the_first_hashes(race):
    assert race[2] is True


def test_the_first_manifest_hashes_every_file_as_it_was_served(race):
    assert race[0] == digests(FIRST)


def test_the_second_acquire_then_reads_the_changed_source(race):
    assert race[1] == digests(SECOND)


def test_an_acquire_waits_for_a_lock_held_elsewhere(http_folder, home):
    """The lock taken as another pipeline would take it: nothing is fetched or read until it is released."""
    www, base = http_folder
    publish(www, FIRST, age_s=100)
    cfg = DataConfig(source=f"{base}/c.tar.gz", **SHORT_BACKOFF)
    reader = Acquire("reader", cfg)
    with locked(mirror_of(cfg.source, home / "sources")):
        reader.start()
        reader.join(WAIT_S)
        waiting = reader.is_alive() and not any((home / "sources" / "http").glob("*/c.tar.gz"))
    reader.join(60)
    assert (waiting, reader.result) == (True, digests(FIRST))


def test_a_lock_held_on_one_source_holds_back_no_other(http_folder, home):
    """Each source has a lock of its own: another source is read while this one's is held."""
    www, base = http_folder
    publish(www, FIRST, age_s=100)
    (www / "other.txt").write_text("another source")
    reader = Acquire("reader", DataConfig(source=f"{base}/other.txt", **SHORT_BACKOFF))
    with locked(mirror_of(f"{base}/c.tar.gz", home / "sources")):
        reader.start()
        reader.join(60)
        result = reader.result
    assert result == digests({"other.txt": "another source"})
