"""`foundry purge --apply` on the places a machine reaches over the network: a DVC remote in S3 (a real
moto_server on 127.0.0.1, as tests/slow/data/test_sources_s3.py uses) and a tracking server's artifact store (a real
MLflow server proxying artifacts: `mlflow-artifacts:` URIs). The canary corpus of tests/fast/purge/test_purge.py,
prepared and pushed to S3 (the workspace's DVC cache emptied, so the purge reads the version from S3), a tiny
version registered on it through the server, its run's `train.jsonl` logged there. No training."""

from __future__ import annotations

import csv
import hashlib
import shutil
from pathlib import Path

import pytest
from conftest import tracking_uri
from helpers_configs import tiny
from helpers_registry import register_tagged
from synthetic import synthetic_docs

from foundry.core.contracts import DataVersion
from foundry.core.fs import remove_tree
from foundry.purge import apply as purge_apply
from foundry.purge import search
from foundry.runtime import tracking

CANARY = "quokka marmalade"
BUCKET, REMOTE = "purge-remote", "s3://purge-remote/dvc"


@pytest.fixture
def mlflow_artifacts_server(mlflow_server):
    """The session's real MLflow server (tests/conftest.py `mlflow_server`), with its own SQLite store, serving
    artifacts from a folder: (url, that folder)."""
    state, running, _ = mlflow_server
    running()
    return state["server"].url, state["home"] / "mlflow" / "served-artifacts"


def corpus(source: Path) -> None:
    """36 documents of word soup and 6 canaries (as tests/fast/purge/test_purge.py's `canary_home`)."""
    for i, text in enumerate(synthetic_docs(36, seed=3) + synthetic_docs(6, seed=11)):
        name = f"doc{i:02d}.txt" if i < 36 else f"secret/canary{i - 36}.txt"
        if i >= 36:
            words = text.split(" ")
            text = " ".join(words[:30] + [CANARY] + words[30:])
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)


def bucket_objects(s3) -> dict[str, bytes]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    return {key: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in keys}


def test_apply_purges_an_s3_remote_and_a_tracking_servers_artifacts(
    s3_env, mlflow_artifacts_server, tmp_path, monkeypatch
):
    from prefect.settings import PREFECT_HOME, temporary_settings

    from foundry.core.preparing import Preparing
    from foundry.data.acquire import acquire_source
    from foundry.data.hydrate import hydrate_version
    from foundry.data.versioning import version_dataset
    from foundry.pretrain.prepare import prepare

    url, served = mlflow_artifacts_server
    s3_env.create_bucket(Bucket=BUCKET)
    home = tmp_path / "home"
    monkeypatch.setenv("FOUNDRY_HOME", str(home))
    corpus(tmp_path / "source")
    config = tiny(f"data.source={tmp_path / 'source'}", f"data.remote={REMOTE}")
    manifest = acquire_source(config.data, tmp_path / "source_manifest.json")
    prepare(Preparing(manifest, config, tmp_path / "prepared"))
    shutil.copy(tmp_path / "prepared" / "train.jsonl", tmp_path / "train.jsonl")
    data = version_dataset(config, tmp_path / "prepared", manifest, home)
    remove_tree(home / "workspace" / ".dvc" / "cache", within=home)  # the version is read from S3, only there
    criterion = search.Criterion(kind="match", value=CANARY)
    with temporary_settings({PREFECT_HOME: tmp_path / "prefect"}), tracking_uri(monkeypatch, url):
        tags = {"data_version": data.data_version, "data.remote": REMOTE}
        run_id = register_tagged(config, "purge-s3", tags).run_id
        tracking.set_tags(run_id, tags)
        tracking.log_artifact(run_id, tmp_path / "train.jsonl", "data")
        # This run's folder alone: the session's server keeps other modules' artifacts beside it.
        ours = served / tracking.client().get_run(run_id).info.artifact_uri.removeprefix("mlflow-artifacts:/")
        assert any(CANARY.encode() in p.read_bytes() for p in ours.rglob("train.jsonl"))

        plan = search.plan(home, criterion, "request 17")
        assert plan.unchecked == () and len(plan.documents) == 6
        (hit,) = plan.data_versions
        (in_s3,) = [c for c in hit.copies if c.where == REMOTE]
        assert set(in_s3.files) == {f.md5 for f in hit.files}  # every object holding a canary, found in S3
        (artifact,) = plan.artifacts
        assert artifact.store.startswith("mlflow-artifacts:") and artifact.path.endswith("/data/train.jsonl")

        record = purge_apply.apply(home, criterion, "request 17")
        assert record is not None and record.verified

        objects = bucket_objects(s3_env)
        assert not [key for key, body in objects.items() if CANARY.encode() in body]
        md5s = {key.removeprefix("dvc/files/md5/").replace("/", "") for key in objects}
        assert not md5s & ({f.md5 for f in hit.files} | {data.data_version + ".dir"})  # token shards too
        assert not [p for p in ours.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
        (train,) = ours.rglob("data/train.jsonl")  # scrubbed in place, the other lines kept
        assert 0 < len(train.read_text().splitlines()) < len((tmp_path / "train.jsonl").read_text().splitlines())

        new = record.replaced[data.data_version]
        copy = hydrate_version(DataVersion(data_version=new, remote=REMOTE), tmp_path / "node")  # from S3
        with open(copy / "documents.csv", newline="") as fh:
            assert len(list(csv.DictReader(fh))) == 36
        assert hashlib.md5((copy / "train.jsonl").read_bytes()).hexdigest() in md5s

        again = search.plan(home, criterion, "request 17")
        assert (again.documents, again.data_versions, again.artifacts, again.unchecked) == ((), (), (), ())
