"""The parts of purging an S3 DVC remote and a tracking server's artifacts that need no server: S3 keys of DVC's
layout, an S3 remote that does not answer (a closed loopback port) reported as not checked, and artifacts read
and rewritten through MLflow's own artifact repository on a folder (`file://`, as a server's would be over
http). The whole path against moto and a real MLflow server: tests/slow/purge/test_purge_remote.py."""

from __future__ import annotations

import json
import socket

import pytest
from conftest import aws_test_env

from foundry.purge import artifacts, served
from foundry.purge.plan import Criterion, Location
from foundry.purge.s3 import S3Store
from foundry.purge.stores import Places

CANARY = "quokka marmalade"
RUN = "0123456789abcdef0123456789abcdef"
MD5 = "ab" + "c" * 30


def needles() -> artifacts.Needles:
    return artifacts.Needles(Criterion(kind="match", value=CANARY), {}, set())


def test_s3_keys_follow_dvc_3s_layout_with_and_without_a_prefix():
    assert S3Store("s3://bucket/team/dvc/").key(MD5) == f"team/dvc/files/md5/ab/{'c' * 30}"
    assert S3Store("s3://bucket").key(MD5, ".dir") == f"files/md5/ab/{'c' * 30}.dir"
    with pytest.raises(ValueError, match="not an s3://bucket/prefix URL"):
        S3Store("gs://bucket/dvc")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


def test_an_s3_remote_that_does_not_answer_is_not_checked(tmp_path, monkeypatch):
    aws_test_env(monkeypatch, tmp_path, f"http://127.0.0.1:{closed_port()}")
    places = Places.of(tmp_path / "home", {"s3://bucket/dvc"})
    assert [s.place for s in places.stores] == ["workspace cache", "hydration cache"]  # not read as empty
    affected = {"1" * 32: (Location(file="train.jsonl", md5=MD5, holds="text", entries=("line 1",)),)}
    (unchecked,) = places.unchecked(affected, {})
    assert unchecked.what == "remote s3://bucket/dvc"
    assert "cannot be listed" in unchecked.why and f"files/md5/ab/{'c' * 30}" in unchecked.why


def artifact_folder(tmp_path):
    """An artifact location as a server keeps one: a run's train.jsonl (two lines of six a canary), a table
    whose every row holds it, and a tokenizer (never read)."""
    root = tmp_path / "artifacts"
    data = root / RUN / "artifacts" / "data"
    data.mkdir(parents=True)
    lines = [json.dumps({"text": f"doc {i}" + (f" {CANARY}" if i in (1, 4) else "")}) for i in range(6)]
    (data / "train.jsonl").write_text("\n".join(lines) + "\n")
    (data / "canaries.jsonl").write_text(json.dumps({"text": CANARY}) + "\n")
    (data / "tokenizer.json").write_text(json.dumps({"vocab": {CANARY: 1}}))
    return root


def test_a_servers_artifacts_are_found_and_scrubbed_through_mlflows_repository(tmp_path):
    root = artifact_folder(tmp_path)
    location = root.as_uri()
    found, read, unchecked = served.scan({"1": ("pipeline", location)}, needles())
    assert (read, unchecked) == (2, [])  # the two .jsonl files; the tokenizer is not text
    assert {(h.path.removeprefix(location + "/"), h.run_id, h.strings, h.store) for h in found} == {
        (f"{RUN}/artifacts/data/canaries.jsonl", RUN, 1, location),
        (f"{RUN}/artifacts/data/train.jsonl", RUN, 2, location),
    }
    assert sorted(served.rewrite(h, needles()) for h in found) == [1, 2]
    train = root / RUN / "artifacts" / "data" / "train.jsonl"
    assert [json.loads(line)["text"] for line in train.read_text().splitlines()] == ["doc 0", "doc 2", "doc 3", "doc 5"]
    assert not (root / RUN / "artifacts" / "data" / "canaries.jsonl").exists()  # nothing left of it: deleted
    assert served.scan({"1": ("pipeline", location)}, needles())[0] == []


def test_a_location_that_cannot_be_read_or_cannot_delete_is_not_checked(tmp_path, monkeypatch):
    from mlflow.store.artifact.artifact_repo import ArtifactRepository
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    class ListOnly(ArtifactRepository):  # what a repository that implements no deletion looks like
        def log_artifact(self, local_file, artifact_path=None): ...
        def log_artifacts(self, local_dir, artifact_path=None): ...
        def list_artifacts(self, path=None):
            return []

        def _download_file(self, remote_file_path, local_path): ...

    assert served.rewritable(LocalArtifactRepository(tmp_path.as_uri()))
    assert not served.rewritable(ListOnly(tmp_path.as_uri()))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a refused connection, at once
    experiments = {"1": ("a", ""), "2": ("b", f"mlflow-artifacts://127.0.0.1:{closed_port()}/2")}
    found, read, unchecked = served.scan(experiments, needles())
    assert (found, read) == ([], 0)
    assert [u.what for u in unchecked] == ["MLflow experiment a (1)", "MLflow experiment b (2)"]
    assert "no artifact location" in unchecked[0].why and "cannot be read" in unchecked[1].why
