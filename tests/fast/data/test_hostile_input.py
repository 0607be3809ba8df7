"""Hostile sources, built as an attacker would and read through the real acquire path (archives served
over http on 127.0.0.1): nothing lands outside the extraction folder, every limit holds and names its key,
the source is never modified, and a bad archive among several sources is skipped under on_error: skip."""

from __future__ import annotations

import gzip
import io
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import POLL
from helpers_hostile import (
    FAST,
    Served,
    add_file,
    add_link,
    outside_folder,
    realpath_limit_attack,
    sparse_tar,
    tar_bytes,
    zip_bytes,
)

from foundry.config import DataConfig
from foundry.data.acquire import SourceError, list_source_files
from foundry.data.formats import read_documents
from foundry.data.remote import digest_of

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)


@pytest.fixture
def outside(tmp_path) -> Path:
    return outside_folder(tmp_path)


# --- paths and links ------------------------------------------------------------------------------


def test_realpath_limit_attack_writes_nothing_outside(http_folder, tmp_path, outside):
    cache = tmp_path / "home" / "sources" / "http" / digest_of(f"{http_folder[1]}/cve.tar.gz")
    cache.mkdir(parents=True)
    (cache / "flag").write_text("original")  # where `escape` resolves to: the folder above the extraction
    served = Served(http_folder, tmp_path, "cve.tar.gz", realpath_limit_attack(cache / "extracting"))

    with pytest.raises(SourceError, match=r"cve.tar.gz: member 'a' is a link to 'd+', which is never extracted"):
        served.acquire(on_error="fail")
    served.assert_clean(extracted=False)

    files, skipped = served.acquire(on_error="skip")  # every link left out; the plain files stay inside
    assert ([f.name for f in files], skipped) == (["doc.txt"], {"archive_link": 19})
    assert (cache / "extracted" / "flaglink").read_bytes() == b"overwrite"
    assert (cache / "extracted" / "escape" / "newfile").read_bytes() == b"new"
    served.assert_clean(extracted=True)


@pytest.mark.parametrize("kind", [tarfile.LNKTYPE, tarfile.SYMTYPE])
def test_a_link_to_a_file_outside_is_never_followed(http_folder, tmp_path, outside, kind):
    def add(tf):
        add_link(tf, "flag.txt", str(outside / "flag"), kind)
        add_file(tf, "flag.txt", b"overwrite")  # the same name again: tarfile would write through the link
        add_link(tf, "out", str(outside))
        add_file(tf, "out/new.txt", b"new")

    served = Served(http_folder, tmp_path, "links.tar", tar_bytes(add, ""))
    with pytest.raises(SourceError, match=r"links.tar: member 'flag.txt' is a link to '/.*outside/flag'"):
        served.acquire(on_error="fail")
    served.assert_clean(extracted=False)

    files, skipped = served.acquire()
    assert sorted(Path(f.path).read_bytes() for f in files) == [b"new", b"overwrite"]
    assert skipped == {"archive_link": 2}
    assert not (outside / "new.txt").exists()
    served.assert_clean(extracted=True)


@pytest.mark.parametrize(
    "member",
    ["/ABS/evil.txt", "../../../../outside/evil.txt", "ok/../../evil.txt", "a/../../../../../../outside/evil.txt"],
)
@pytest.mark.parametrize("container", ["tar.gz", "zip"])
def test_a_member_named_outside_refuses_the_archive(http_folder, tmp_path, outside, member, container):
    member = member.replace("/ABS", str(outside))
    members = {"first.txt": b"fine", member: b"escape"}
    if container == "zip":
        data = zip_bytes(members)
    else:
        data = tar_bytes(lambda tf: [add_file(tf, name, body) for name, body in members.items()])
    served = Served(http_folder, tmp_path, f"slip.{container}", data)
    for on_error in ("skip", "fail"):  # a single source: refused either way
        with pytest.raises(SourceError, match=f"member {member!r} would extract outside its folder"):
            served.acquire(on_error=on_error)
    assert not (outside / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()
    served.assert_clean(extracted=False)


@pytest.mark.parametrize("kind", [tarfile.FIFOTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE])
def test_special_files_are_never_created(http_folder, tmp_path, outside, kind):
    def add(tf):
        info = tarfile.TarInfo("pipe.txt")
        info.type, info.devmajor, info.devminor = kind, 1, 3  # 1,3: /dev/null
        tf.addfile(info)
        add_file(tf, "doc.txt", b"a document")

    served = Served(http_folder, tmp_path, "special.tar.gz", tar_bytes(add))
    with pytest.raises(SourceError, match="member 'pipe.txt' is a special file"):
        served.acquire(on_error="fail")
    files, skipped = served.acquire()
    assert ([f.name for f in files], skipped) == (["doc.txt"], {"archive_special_file": 1})
    assert not (served.cache / "extracted" / "pipe.txt").exists()
    served.assert_clean(extracted=True)


def test_a_zip_symlink_entry_is_left_out(http_folder, tmp_path, outside):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        link = zipfile.ZipInfo("leak.txt")
        link.external_attr = (0o120777 << 16) | 0x20  # S_IFLNK: zipfile's extractall wrote the target as text
        zf.writestr(link, str(outside / "flag"))
        zf.writestr("doc.txt", "a document")
    served = Served(http_folder, tmp_path, "links.zip", buffer.getvalue())
    files, skipped = served.acquire()
    assert ([f.name for f in files], skipped) == (["doc.txt"], {"archive_link": 1})
    served.assert_clean(extracted=True)


def test_an_archive_made_with_tar_dot_is_extracted(http_folder, tmp_path, outside):
    corpus = tmp_path / "made" / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "sub" / "a.txt").write_text("first")
    served = Served(http_folder, tmp_path, "dot.tgz", tar_bytes(lambda tf: tf.add(corpus, arcname=".")))
    files, skipped = served.acquire(on_error="fail")
    assert ([(f.name, Path(f.path).read_text()) for f in files], skipped) == ([("sub/a.txt", "first")], {})
    served.assert_clean(extracted=True)


# --- sizes ----------------------------------------------------------------------------------------


def test_zip_bomb_stops_at_the_inflated_limit(http_folder, tmp_path, outside):
    served = Served(http_folder, tmp_path, "bomb.zip", zip_bytes({"a.txt": b"x", "zeros.txt": bytes(2 << 20)}))
    assert (served.www / "bomb.zip").stat().st_size < 10_000
    with pytest.raises(
        SourceError, match=r"member 'zeros.txt' takes the archive past 524288 .*data.max_inflated_bytes"
    ):
        served.acquire(max_inflated_bytes=512 << 10)
    served.assert_clean(extracted=False)


@pytest.mark.parametrize("container", ["tar.gz", "zip"])
def test_ratio_bomb_stops_at_the_ratio_limit(http_folder, tmp_path, outside, container):
    members = {f"part{i}.txt": bytes(1 << 20) for i in range(4)}  # 4 MiB of zeros in a few KB
    if container == "zip":
        data = zip_bytes(members)
    else:
        data = tar_bytes(lambda tf: [add_file(tf, name, body) for name, body in members.items()])
    served = Served(http_folder, tmp_path, f"ratio.{container}", data)
    with pytest.raises(SourceError, match=r"member 'part1.txt' takes the archive past \d+ .*data.max_inflation_ratio"):
        served.acquire(max_inflation_ratio=10)
    served.assert_clean(extracted=False)
    files, _ = served.acquire(max_inflation_ratio=10_000)  # zeros compress ~1000x; the key decides
    assert len(files) == 4


@pytest.mark.parametrize("container", ["tar.gz", "zip"])
def test_too_many_members(http_folder, tmp_path, outside, container):
    members = {f"d{i}.txt": b"doc" for i in range(11)}
    if container == "zip":
        data = zip_bytes(members)
    else:
        data = tar_bytes(lambda tf: [add_file(tf, name, body) for name, body in members.items()])
    served = Served(http_folder, tmp_path, f"many.{container}", data)
    with pytest.raises(SourceError, match=r"member 'd10.txt' is past 10 members \(data.max_archive_members\)"):
        served.acquire(max_archive_members=10)
    served.assert_clean(extracted=False)
    assert len(served.acquire(max_archive_members=11)[0]) == 11


def test_sparse_member_is_refused_before_it_inflates(http_folder, tmp_path, outside):
    served = Served(http_folder, tmp_path, "sparse.tar.gz", sparse_tar("huge.txt", 4 << 30))
    assert (served.www / "sparse.tar.gz").stat().st_size < 400
    with pytest.raises(SourceError, match=r"member 'huge.txt' takes the archive past \d+ inflated bytes"):
        served.acquire(on_error="fail")
    served.assert_clean(extracted=False)


def test_a_file_over_the_size_limit_is_refused_before_hashing(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "doc.txt").write_text("a document")
    with open(corpus / "sparse.txt", "wb") as f:
        f.truncate((4 << 30) + 1)  # a hole: costs no disk, would cost 4 s of hashing
    files, skipped = list_source_files(DataConfig(source=str(corpus)))
    assert ([f.name for f in files], skipped) == (["doc.txt"], {"too_large": 1})
    with pytest.raises(SourceError, match=r"sparse.txt: 4294967297 bytes, more than data.max_file_bytes"):
        list_source_files(DataConfig(source=str(corpus), on_error="fail"))


def test_an_oversized_download_is_refused(http_folder, tmp_path, outside):
    served = Served(http_folder, tmp_path, "big.txt", b"word " * 2000)
    with pytest.raises(SourceError, match=r"big.txt: more than 1000 bytes \(data.max_download_bytes\)"):
        served.acquire(max_download_bytes=1000)
    assert not [p for p in (tmp_path / "home").rglob("big.txt*")]
    served.assert_clean(extracted=False)


def test_a_download_without_length_is_cut_off_at_the_limit(tmp_path):
    import http.server
    import threading

    class Endless(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # no Content-Length: the body ends when the server closes, or never
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"x" * 65536)
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, kwargs=POLL, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/stream.txt"
        with pytest.raises(SourceError, match=r"stream.txt: more than 100000 bytes \(data.max_download_bytes\)"):
            list_source_files(DataConfig(source=url, max_download_bytes=100_000, **FAST))
    finally:
        server.shutdown()
        server.server_close()
    assert not [p for p in (tmp_path / "home").rglob("stream.txt*")]


@pytest.mark.parametrize(
    ("name", "settings", "key"),
    [
        ("blank.jsonl.gz", {}, "data.max_inflation_ratio"),
        ("table.parquet.gz", {}, "data.max_inflation_ratio"),
        ("table.parquet.gz", {"max_inflated_bytes": 100_000, "max_inflation_ratio": 1e6}, "data.max_inflated_bytes"),
    ],
)
def test_a_gz_file_that_inflates_past_the_limits_is_rejected(tmp_path, monkeypatch, name, settings, key):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"\n" * (8 << 20)))  # 8 MiB of blank lines in ~8 KB
    before = path.read_bytes()
    rejects = []
    cfg = DataConfig(**settings)
    docs = list(
        read_documents(str(path), name, cfg, lambda where, reason, detail="": rejects.append((where, reason, detail)))
    )
    assert docs == []
    assert [(where, reason) for where, reason, _ in rejects] == [(name, "inflated_too_large")]
    assert key in rejects[0][2]
    assert list(scratch.iterdir()) == []  # the parquet's temporary copy is gone
    assert path.read_bytes() == before


# --- on_error ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", [zip_bytes({"../evil.txt": b"escape"}), b"not an archive at all", zip_bytes({"x.txt": bytes(2 << 20)})]
)
def test_a_bad_archive_among_sources_is_skipped_or_fatal(http_folder, tmp_path, outside, bad):
    good = tmp_path / "good"
    good.mkdir()
    (good / "doc.txt").write_text("a document")
    served = Served(http_folder, tmp_path, "bad.zip", bad)
    settings = {"source": str(good), "sources": [served.url], "max_inflated_bytes": 1 << 20, **FAST}
    files, skipped = list_source_files(DataConfig(**settings))
    assert ([f.name for f in files], skipped) == (["0/doc.txt"], {"bad_archive": 1})
    with pytest.raises(SourceError, match="bad.zip"):
        list_source_files(DataConfig(**settings, on_error="fail"))
    served.assert_clean(extracted=False)
