"""Remote sources stay fresh on S3: objects compared by ETag against a real moto server on 127.0.0.1, and
deletions followed. The http(s) cases: tests/fast/data/test_fresh_sources.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_sources import SHORT_BACKOFF

from foundry.config import DataConfig
from foundry.data.acquire import acquire_source

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)


def test_s3_objects_are_compared_by_etag_and_deletions_follow(s3_env, tmp_path):
    s3_env.create_bucket(Bucket="fresh")
    for key, body in {"p/a.txt": "alpha", "p/b.txt": "beta", "p/c.txt": "gamma"}.items():
        s3_env.put_object(Bucket="fresh", Key=key, Body=body)
    cfg = DataConfig(source="s3://fresh/p", **SHORT_BACKOFF)
    first = acquire_source(cfg, tmp_path / "m1.json")
    assert [f.name for f in first.entries] == ["a.txt", "b.txt", "c.txt"]
    assert all(f.etag and f.last_modified and f.origin == f"s3://fresh/p/{f.name}" for f in first.entries)

    s3_env.put_object(Bucket="fresh", Key="p/a.txt", Body="ALPHA")  # same size, new content
    s3_env.delete_object(Bucket="fresh", Key="p/c.txt")
    second = acquire_source(cfg, tmp_path / "m2.json")
    assert [(f.name, Path(f.path).read_text()) for f in second.entries] == [("a.txt", "ALPHA"), ("b.txt", "beta")]
    assert second.entries[0].etag != first.entries[0].etag
    assert not Path(first.entries[2].path).exists()
    assert second.new_since(first) == ["a.txt"]
