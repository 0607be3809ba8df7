"""The purge's fail-closed places (`purge_unchecked`, local remotes in `purge_stores`), whole-name matching
(`purge_plan.names_in`) and the regex kept off configuration and code (`artifacts.is_config`): plain
files under tmp_path, no registry."""

from __future__ import annotations

import gzip
import hashlib

from foundry.purge import artifacts, home
from foundry.purge import unchecked as purge_unchecked
from foundry.purge.plan import Criterion, names_in
from foundry.purge.stores import Places

DOCUMENT = "the quokka marmalade jar\n"


def plant(path, data: str | bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def test_compressed_mirror_files_are_unchecked_and_images_and_covered_archives_are_not(tmp_path):
    sources = tmp_path / "sources"
    plant(sources / "s3" / "aa" / "t.parquet", b"PAR1\0\0PAR1")
    plant(sources / "s3" / "aa" / "u.txt.gz", gzip.compress(b"words"))
    plant(sources / "s3" / "bb" / "photo.jpg", b"\xff\xd8\0\0")
    plant(sources / "http" / "cc" / "corpus.tar.gz", gzip.compress(b"words"))  # read through its extraction
    plant(sources / "http" / "cc" / "extracted" / "a.txt", "words")
    found = purge_unchecked.home_places(tmp_path)
    assert [(u.what, u.why.split(" (")[0]) for u in found] == [
        ("source mirror sources/s3/aa/…", "a compressed source mirror file the purge cannot read")
    ]


def test_a_hydration_scratch_folder_is_unchecked(tmp_path):
    plant(tmp_path / "hydrated" / ".pull-0a1b2c3d" / "prepared" / "train.jsonl", "{}")
    (found,) = purge_unchecked.home_places(tmp_path)
    assert found.what == "hydration scratch hydrated/.pull-0a1b2c3d" and "when it is gone" in found.why


def test_a_named_local_remote_that_is_no_folder_is_unchecked_but_the_default_is_not(tmp_path):
    places = Places.of(tmp_path, {str(tmp_path / "dvc-remote"), str(tmp_path / "unmounted")})
    assert [u.what for u in places.unchecked({}, {})] == [f"remote {tmp_path / 'unmounted'}"]


def test_names_match_only_whole_names():
    assert not names_in("secret/file.jsonl:30", "secret/file.jsonl:3")
    assert not names_in("data.txt", "a.txt") and not names_in("docs/a.txt", "a.txt")
    assert names_in('{"name": "secret/file.jsonl:3", "n": 1}', "secret/file.jsonl:3")
    assert names_in("read secret/file.jsonl:3.", "secret/file.jsonl:3")
    needles = artifacts.Needles(Criterion(kind="match", value="nothing here"), {}, {"a.txt"})
    assert not needles.hit("data.txt") and needles.hit("a.txt: 3 documents")


def test_the_regex_never_rewrites_configuration_or_code(tmp_path):
    sha = hashlib.sha256(DOCUMENT.encode()).hexdigest()
    needles = artifacts.Needles(Criterion(kind="match", value=r"torch|/home/jane"), {sha: DOCUMENT}, set())
    model = tmp_path / "artifacts" / "1" / ("0" * 32) / "artifacts" / "model"
    config = [
        plant(model / "requirements.txt", "torch==2.13.0\nnumpy\n"),
        plant(model / "conda.yaml", "dependencies:\n- torch\n"),
        plant(model / "config.json", '{"source": "/home/jane/corpus"}'),
        plant(model / "input_example.json", '{"prompt": "torch"}'),
        plant(model / "code" / "notes.md", "torch\n"),
        plant(tmp_path / "workspace" / "params.yaml", "data:\n  source: /home/jane/corpus\n"),
    ]
    before = {p: p.read_bytes() for p in config}
    plant(model / "MLmodel", f"signature: {DOCUMENT}")  # a document's whole text counts everywhere
    notes = plant(model.parent / "notes.txt", "torch\n")
    found, _ = artifacts.scan(tmp_path / "artifacts", needles)
    assert sorted(h.path.rsplit("/", 1)[1] for h in found) == ["MLmodel", "notes.txt"]
    assert [h.where for h in home.scan(tmp_path, needles, prefect=False)] == []
    for path in config:
        artifacts.rewrite(path, tmp_path, needles)
    assert {p: p.read_bytes() for p in config} == before
    assert artifacts.rewrite(notes, tmp_path, needles) == 1
