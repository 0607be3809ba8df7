"""S3 sources against a real moto server on 127.0.0.1: a prefix listed, a missing bucket alone or among
several sources, and mixed formats from several sources prepared. The other sources: tests/fast/data/test_sources.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from helpers_sources import write

from foundry.config import DataConfig, load_config
from foundry.core.preparing import Preparing
from foundry.data.acquire import SourceError, acquire_source, list_source_files
from foundry.pretrain.prepare import prepare

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)


# --- S3 --------------------------------------------------------------------------------------


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


def test_s3_bucket_that_does_not_exist(s3_env):
    with pytest.raises(SourceError, match="cannot read s3://no-such-bucket/x.*NoSuchBucket"):
        list_source_files(DataConfig(source="s3://no-such-bucket/x"))


def test_missing_bucket_among_several_sources_is_skipped_or_fatal(s3_env, tmp_path):
    write(tmp_path / "local" / "a.txt", "alpha")
    sources = ["s3://no-such-bucket/x", str(tmp_path / "local")]
    files, skipped = list_source_files(DataConfig(source="", sources=sources))
    assert [f.name for f in files] == ["1/a.txt"] and skipped == {"unreachable_source": 1}
    with pytest.raises(SourceError, match="NoSuchBucket"):
        list_source_files(DataConfig(source="", sources=sources, on_error="fail"))


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
    prepared = prepare(Preparing(acquire_source(config.data, tmp_path / "m.json"), config, tmp_path / "prepared"))
    assert prepared.manifest.stats["docs_in"] == 12 and prepared.manifest.stats["docs_out"] == 12
    sources = {
        json.loads(line)["source"]
        for split in ("train", "holdout")
        for line in (tmp_path / "prepared" / f"{split}.jsonl").read_text().splitlines()
    }
    assert sources == {"0/a.md", "0/b.jsonl.gz", "0/c.parquet", "1/0.txt", "1/1.txt", "1/2.txt"}
