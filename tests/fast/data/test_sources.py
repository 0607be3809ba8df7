"""Several sources at once; unreachable sources; odd files. S3 against a real moto server:
tests/slow/data/test_sources_s3.py."""

from __future__ import annotations

import json
import os
import socket

import pytest
from helpers_sources import write

from foundry.config import DataConfig, load_config
from foundry.data.acquire import SourceError, acquire_source, list_source_files

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- several sources -------------------------------------------------------------------------


def test_sources_are_read_in_order_with_names_kept_apart(tmp_path, http_folder):
    folder, base = http_folder
    write(folder / "remote.md", "# over http")
    write(tmp_path / "one" / "a.txt", "one")
    write(tmp_path / "two" / "a.txt", "two")
    cfg = DataConfig(source=str(tmp_path / "one"), sources=[f"{base}/remote.md", str(tmp_path / "two")])
    files, _ = list_source_files(cfg)
    assert [f.name for f in files] == ["0/a.txt", "1/remote.md", "2/a.txt"]
    manifest = acquire_source(cfg, tmp_path / "m.json")
    assert manifest.sources == cfg.source_list and manifest.files == 3
    assert manifest.source == ", ".join(cfg.source_list)


def test_unreachable_sources(tmp_path):
    write(tmp_path / "ok" / "a.txt", "fine")
    dead = f"http://127.0.0.1:{free_port()}/gone.txt"
    fast = {"fetch_retries": 1, "fetch_backoff_s": 0.01}
    cfg = DataConfig(source=str(tmp_path / "ok"), sources=[dead, str(tmp_path / "missing")], **fast)
    files, skipped = list_source_files(cfg)
    assert [f.name for f in files] == ["0/a.txt"] and skipped == {"unreachable_source": 2}
    with pytest.raises(SourceError, match="cannot download"):
        list_source_files(cfg.model_copy(update={"on_error": "fail"}))
    with pytest.raises(SourceError, match="no source could be read: cannot download.*does not exist"):
        list_source_files(DataConfig(source=dead, sources=[str(tmp_path / "missing")], **fast))


def test_single_source_and_list_forms_in_config():
    assert load_config(None, ["data.source=a"]).data.source_list == ["a"]
    assert load_config(None, ["data.source=", "data.sources=[a, b]"]).data.source_list == ["a", "b"]
    with pytest.raises(ValueError, match="no source"):
        DataConfig(source="", sources=[])
    with pytest.raises(ValueError, match="listed twice"):
        DataConfig(source="a", sources=["a"])
    with pytest.raises(ValueError, match="start with a dot"):
        DataConfig(extensions=["txt"])


def test_gzip_variants_of_listed_extensions_are_found(tmp_path):
    for name in ("a.txt", "b.txt.gz", "c.jsonl.gz", "d.parquet", "e.gz", "f.csv.gz"):
        write(tmp_path / "src" / name, "x")
    files, _ = list_source_files(DataConfig(source=str(tmp_path / "src")))
    assert [f.name for f in files] == ["a.txt", "b.txt.gz", "c.jsonl.gz", "d.parquet"]


def test_a_fifo_is_skipped_not_read(tmp_path):
    write(tmp_path / "src" / "a.txt", "fine")
    os.mkfifo(tmp_path / "src" / "pipe.txt")  # reading it would block forever
    files, skipped = list_source_files(DataConfig(source=str(tmp_path / "src")))
    assert [f.name for f in files] == ["a.txt"] and skipped == {"not_regular_file": 1}
    with pytest.raises(SourceError, match="not a regular file"):
        list_source_files(DataConfig(source=str(tmp_path / "src"), on_error="fail"))


LIST_SOURCE = """
import json, sys
from foundry.config import DataConfig
from foundry.data.acquire import list_source_files
files, skipped = list_source_files(DataConfig(source=sys.argv[1]))
print(json.dumps({"files": [f.name for f in files], "skipped": skipped}))
"""


def test_unreadable_file_is_skipped(tmp_path):
    """A file the process may not read. Root reads any file through two capabilities (DAC override and
    read-search), so as root the listing runs without them (util-linux's setpriv): the kernel then
    refuses the read as it does for any other user."""
    import subprocess
    import sys

    write(tmp_path / "src" / "a.txt", "fine")
    locked = write(tmp_path / "src" / "b.txt", "secret")
    locked.chmod(0)
    without_root_reads = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    listing = subprocess.run(
        [*without_root_reads, sys.executable, "-c", LIST_SOURCE, str(tmp_path / "src")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listing.returncode == 0, listing.stderr[-2000:]
    assert json.loads(listing.stdout) == {"files": ["a.txt"], "skipped": {"unreadable": 1}}
