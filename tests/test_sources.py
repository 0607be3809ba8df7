"""Several sources at once; S3 against a real moto server on 127.0.0.1; unreachable sources; odd files."""

from __future__ import annotations

import gzip
import json
import os
import socket
from pathlib import Path

import pytest

from foundry.config import DataConfig, load_config
from foundry.data.acquire import SourceError, acquire_source, list_source_files
from foundry.data.prepare import prepare


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


# --- S3 --------------------------------------------------------------------------------------


@pytest.mark.slow  # starts moto_server
def test_s3_prefix_is_downloaded_and_listed(s3_env, home):
    s3_env.create_bucket(Bucket="corpus")
    for key, body in {
        "data/a.txt": "alpha",
        "data/sub/b.jsonl.gz": gzip.compress(b'{"text": "beta"}\n'),
        "data/skip.csv": "x,y",
        "other/c.txt": "not under the prefix",
    }.items():
        s3_env.put_object(Bucket="corpus", Key=key, Body=body)
    files, skipped = list_source_files(DataConfig(source="s3://corpus/data"))
    assert [f.name for f in files] == ["a.txt", "sub/b.jsonl.gz"] and skipped == {}
    assert all(Path(f.path).is_relative_to(home / "sources" / "s3") for f in files)
    assert Path(files[0].path).read_text() == "alpha"


@pytest.mark.slow  # starts moto_server
def test_s3_bucket_that_does_not_exist(s3_env):
    with pytest.raises(SourceError, match="cannot read s3://no-such-bucket/x.*NoSuchBucket"):
        list_source_files(DataConfig(source="s3://no-such-bucket/x"))


@pytest.mark.slow  # starts moto_server
def test_missing_bucket_among_several_sources_is_skipped_or_fatal(s3_env, tmp_path):
    write(tmp_path / "local" / "a.txt", "alpha")
    sources = ["s3://no-such-bucket/x", str(tmp_path / "local")]
    files, skipped = list_source_files(DataConfig(source="", sources=sources))
    assert [f.name for f in files] == ["1/a.txt"] and skipped == {"unreachable_source": 1}
    with pytest.raises(SourceError, match="NoSuchBucket"):
        list_source_files(DataConfig(source="", sources=sources, on_error="fail"))


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


@pytest.mark.slow  # starts moto_server
def test_mixed_formats_from_several_sources_prepare(tmp_path, s3_env):
    """Local text, jsonl.gz and parquet plus an S3 prefix, through the whole preparation."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    words = "river stone light cloud forest engine paper window silver garden motion harbor".split()
    docs = [" ".join(words[(i + j) % len(words)] + str(j % 7 + i) for j in range(60)) + "\n" for i in range(12)]
    write(tmp_path / "local" / "a.md", docs[0])
    write(
        tmp_path / "local" / "b.jsonl.gz",
        gzip.compress("".join(json.dumps({"text": d}) + "\n" for d in docs[1:5]).encode()),
    )
    pq.write_table(pa.table({"text": docs[5:9]}), tmp_path / "local" / "c.parquet")
    s3_env.create_bucket(Bucket="mixed")
    for i, d in enumerate(docs[9:]):
        s3_env.put_object(Bucket="mixed", Key=f"p/{i}.txt", Body=d.encode())
    config = load_config(
        None,
        [
            f"data.source={tmp_path / 'local'}",
            "data.sources=[s3://mixed/p]",
            "data.min_alpha_fraction=0.1",
            "data.holdout_fraction=0.2",
            "tokenizer.vocab_size=300",
        ],
    )
    prepared = prepare(acquire_source(config.data, tmp_path / "m.json"), config, tmp_path / "prepared", progress=False)
    assert prepared.manifest.stats["docs_in"] == 12 and prepared.manifest.stats["docs_out"] == 12
    sources = {
        json.loads(line)["source"]
        for split in ("train", "holdout")
        for line in (tmp_path / "prepared" / f"{split}.jsonl").read_text().splitlines()
    }
    assert sources == {"0/a.md", "0/b.jsonl.gz", "0/c.parquet", "1/0.txt", "1/1.txt", "1/2.txt"}
