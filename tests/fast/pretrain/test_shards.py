"""foundry.pretrain.shards and foundry.pretrain.prepare: the tokenizer, shard files, their manifest and the prepared directory."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from synthetic import synthetic_docs

import foundry.pretrain.shards as shards_module
from foundry.config import DataConfig, TokenizerConfig, load_config
from foundry.core.preparing import Preparing
from foundry.data.acquire import acquire_source
from foundry.data.manifest import DatasetManifest
from foundry.pretrain.clean import iter_texts
from foundry.pretrain.prepare import prepare, prepare_metrics
from foundry.pretrain.shards import (
    EOT,
    EncodeJob,
    SplitTokens,
    assemble_shards,
    encode_chunk,
    load_split,
    token_dtype,
    train_tokenizer,
)


def write_corpus(root: Path, docs: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(docs):
        (root / f"doc{i:03d}.txt").write_text(text)
    return root


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(iter(synthetic_docs(40)), TokenizerConfig(vocab_size=300))


# --- tokenizer -------------------------------------------------------------------------------


def test_tokenizer_has_requested_vocab_and_eot(tokenizer):
    assert tokenizer.get_vocab_size() == 300
    eot = tokenizer.token_to_id(EOT)
    assert eot is not None and 0 <= eot < 300
    assert tokenizer.encode(EOT).ids == [eot]


def test_tokenizer_round_trips_any_text(tokenizer):
    text = "river stone \u00e9t\u00e9 \u2603 \t tabs\n and Zebra 123"
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_tokenizer_learned_merges(tokenizer):
    # Words it saw often become fewer tokens than their bytes.
    assert len(tokenizer.encode("river stone garden").ids) < len("river stone garden")


# --- token_dtype -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vocab, dtype", [(300, np.uint16), (65535, np.uint16), (65536, np.uint16), (65537, np.uint32), (100_000, np.uint32)]
)
def test_token_dtype_threshold(vocab, dtype):
    assert token_dtype(vocab) == np.dtype(dtype)
    assert np.iinfo(token_dtype(vocab)).max >= vocab - 1


# --- encode_chunk and assemble_shards: the pipeline's path from split file to shards ----------


def write_shards(tokenizer, texts, out_dir: Path, split: str, shard_tokens: int, chunks: int = 2) -> list[dict]:
    """`texts` as a split file, encoded in `chunks` byte ranges (cut at line ends, as prepare cuts them)
    by `encode_chunk`, then cut into shards by `assemble_shards`: what `prepare` does, minus the rest."""
    work = Path(tempfile.mkdtemp())
    lines = [(json.dumps({"text": t}) + "\n").encode() for t in texts]
    (work / "split.jsonl").write_bytes(b"".join(lines))
    tokenizer.save(str(work / "tokenizer.json"))
    ends = np.cumsum([0] + [len(line) for line in lines])
    cuts = sorted({int(ends[round(k * len(lines) / chunks)]) for k in range(chunks + 1)})
    ranges = [
        {"texts": str(work / "split.jsonl"), "start": a, "end": b, "out": str(work / f"t{i}.bin")}
        for i, (a, b) in enumerate(zip(cuts, cuts[1:]))
    ]
    try:
        encoded = [done for r in ranges for done in encode_chunk(EncodeJob(str(work / "tokenizer.json"), (r,)))]
        return assemble_shards(encoded, out_dir, split, shard_tokens, token_dtype(tokenizer.get_vocab_size()))
    finally:
        shutil.rmtree(work)


def expected_ids(tokenizer, texts: list[str]) -> list[int]:
    eot = tokenizer.token_to_id(EOT)
    return [t for text in texts for t in (*tokenizer.encode(text).ids, eot)]


def read_shard(path: Path, dtype: str) -> np.ndarray:
    return np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<"))


@pytest.mark.parametrize("batch", [512, 3])  # one encode batch, and shard ends falling between batches
def test_write_shards_splits_at_boundaries(tmp_path, tokenizer, monkeypatch, batch):
    monkeypatch.setattr(shards_module, "ENCODE_BATCH", batch)
    texts = synthetic_docs(10, seed=1, words=20)
    ids = expected_ids(tokenizer, texts)
    entries = write_shards(tokenizer, iter(texts), tmp_path, "train", shard_tokens=50)
    assert len(entries) == -(-len(ids) // 50)
    assert [e["file"] for e in entries] == [f"train_{i:03d}.bin" for i in range(len(entries))]
    assert all(e["split"] == "train" and e["dtype"] == "uint16" for e in entries)
    assert [e["tokens"] for e in entries[:-1]] == [50] * (len(entries) - 1)
    assert 0 < entries[-1]["tokens"] <= 50
    got = []
    for e in entries:
        path = tmp_path / e["file"]
        assert path.stat().st_size == 2 * e["tokens"]
        assert e["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        got += read_shard(path, e["dtype"]).tolist()
    assert got == ids
    eot = tokenizer.token_to_id(EOT)
    assert got.count(eot) == len(texts) and got[-1] == eot


def test_shards_do_not_depend_on_how_the_encoding_was_divided(tmp_path, tokenizer):
    texts = synthetic_docs(9, seed=4, words=15)
    outputs = {}
    for chunks in (1, 2, 3, 9):
        out = tmp_path / str(chunks)
        out.mkdir()
        outputs[chunks] = (write_shards(tokenizer, texts, out, "train", 37, chunks), files_of(out))
    assert len({json.dumps(v, sort_keys=True, default=repr) for v in outputs.values()}) == 1
    assert (
        np.asarray(read_shard(tmp_path / "1" / "train_000.bin", "uint16")).tolist()
        == expected_ids(tokenizer, texts)[:37]
    )


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_encode_chunk_writes_each_range_and_counts_its_tokens(tmp_path, tokenizer):
    texts = synthetic_docs(4, seed=6, words=12)
    lines = [(json.dumps({"text": t}) + "\n").encode() for t in texts]
    (tmp_path / "split.jsonl").write_bytes(b"".join(lines))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    middle = len(lines[0]) + len(lines[1])
    ranges = tuple(
        {"texts": str(tmp_path / "split.jsonl"), "start": a, "end": b, "out": str(tmp_path / name)}
        for a, b, name in ((0, middle, "a.bin"), (middle, sum(map(len, lines)), "b.bin"))
    )
    results = encode_chunk(EncodeJob(str(tmp_path / "tokenizer.json"), ranges))
    for result, part in zip(results, (texts[:2], texts[2:])):
        assert read_shard(Path(result["out"]), "uint16").tolist() == expected_ids(tokenizer, part)
        assert result["tokens"] == len(expected_ids(tokenizer, part))


def test_write_shards_exact_fit_leaves_no_empty_shard(tmp_path, tokenizer):
    texts = synthetic_docs(4, seed=2, words=10)
    total = len(expected_ids(tokenizer, texts))
    entries = write_shards(tokenizer, iter(texts), tmp_path, "holdout", shard_tokens=total)
    assert [(e["file"], e["tokens"]) for e in entries] == [("holdout_000.bin", total)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["holdout_000.bin"]


def test_write_shards_of_nothing(tmp_path, tokenizer):
    assert write_shards(tokenizer, [], tmp_path, "holdout", shard_tokens=64) == []
    assert list(tmp_path.iterdir()) == []


def test_empty_document_still_gets_eot(tmp_path, tokenizer):
    entries = write_shards(tokenizer, iter(["", "river"]), tmp_path, "train", shard_tokens=1024)
    ids = read_shard(tmp_path / entries[0]["file"], "uint16").tolist()
    eot = tokenizer.token_to_id(EOT)
    assert ids[0] == eot and ids[-1] == eot and ids.count(eot) == 2


# --- load_split ------------------------------------------------------------------------------


def shards_manifest(shards: list[dict]) -> DatasetManifest:
    """A manifest that lists these shards; the rest is placeholder (load_split reads only the shards)."""
    tokens = {split: sum(s["tokens"] for s in shards if s["split"] == split) for split in ("train", "holdout")}
    return DatasetManifest(
        source="test",
        source_digest="",
        source_skipped={},
        stats={},
        holdout_fraction=0.0,
        vocab_size=300,
        eot_id=0,
        dtype="uint16",
        shards=shards,
        train_tokens=tokens["train"],
        holdout_tokens=tokens["holdout"],
    )


def test_load_split_concatenates_in_manifest_order(tmp_path, tokenizer):
    texts = synthetic_docs(6, seed=3, words=20)
    train = write_shards(tokenizer, iter(texts), tmp_path, "train", shard_tokens=40)
    holdout = write_shards(tokenizer, iter(texts[:1]), tmp_path, "holdout", shard_tokens=1000)
    shards_manifest(train + holdout).write(tmp_path)
    assert len(train) > 2
    tokens = load_split(tmp_path, "train")
    expected = expected_ids(tokenizer, texts)
    assert isinstance(tokens, SplitTokens) and all(isinstance(p, np.memmap) for p in tokens.parts)  # nothing read
    assert len(tokens) == len(expected) and np.asarray(tokens).tolist() == expected
    for start, stop in ((0, 40), (35, 45), (39, 121), (5, 5), (len(expected) - 3, len(expected) + 10)):
        assert tokens[start:stop].tolist() == expected[start:stop]  # within a shard and across boundaries
    assert [int(tokens[i]) for i in (0, 40, -1)] == [expected[0], expected[40], expected[-1]]
    single = load_split(tmp_path, "holdout")
    assert isinstance(single, np.memmap)
    assert single.tolist() == expected_ids(tokenizer, texts[:1])


def test_load_split_without_tokens(tmp_path):
    (tmp_path / "empty.bin").write_bytes(b"")
    shard = {"file": "empty.bin", "split": "holdout", "dtype": "uint16", "tokens": 0, "sha256": ""}
    shards_manifest([shard]).write(tmp_path)
    with pytest.raises(ValueError, match="holds no holdout tokens"):
        load_split(tmp_path, "holdout")
    with pytest.raises(ValueError, match="holds no train tokens"):
        load_split(tmp_path, "train")


# --- prepare ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    base = tmp_path_factory.mktemp("prep")
    root = write_corpus(base / "corpus", synthetic_docs(40))
    (root / "short.txt").write_text("too short to keep\n")
    (root / "dupe.txt").write_text(synthetic_docs(40)[0])
    config = load_config(
        None,
        [
            f"data.source={root}",
            "data.holdout_fraction=0.3",
            "data.shard_tokens=1024",
            "tokenizer.vocab_size=300",
            "model.block_size=16",
        ],
    )
    source = acquire_source(config.data, base / "source_manifest.json")
    out = base / "prepared"
    out.mkdir()
    (out / "stale.bin").write_bytes(b"old")
    manifest = prepare(Preparing(source, config, out)).manifest
    return source, config, out, manifest


def test_prepare_writes_a_self_describing_directory(prepared):
    source, _, out, manifest = prepared
    assert DatasetManifest.read(out) == manifest  # what prepare returns is what it wrote (lineage counts aside)
    assert json.loads((out / "manifest.json").read_text()) == manifest.as_json()
    assert manifest.ledger.documents == 40 and "ledger.csv" in manifest.files
    for name in ("train.jsonl", "holdout.jsonl", "documents.csv", "tokenizer.json"):
        assert (out / name).is_file()
    assert not (out / "stale.bin").exists()
    assert manifest.source_digest == source.digest
    assert manifest.source == source.source
    assert manifest.holdout_fraction == 0.3


def test_prepare_counts(prepared):
    _, _, out, manifest = prepared
    stats = manifest.stats
    assert stats["docs_in"] == 42 and stats["docs_out"] == 40
    assert stats["dropped_too_short"] == 1 and stats["dropped_exact_duplicate"] == 1
    assert stats["train_docs"] + stats["holdout_docs"] == 40
    assert stats["train_docs"] == len(list(iter_texts(out / "train.jsonl")))
    assert stats["holdout_bytes"] == sum(len(t.encode()) for t in iter_texts(out / "holdout.jsonl"))
    assert manifest.vocab_size == 300 and manifest.dtype == "uint16"
    for split in ("train", "holdout"):
        tokens = load_split(out, split)
        assert manifest.tokens(split) == len(tokens)
        assert manifest.tokens(split) == sum(s.tokens for s in manifest.shards if s.split == split)
        assert int((np.asarray(tokens) == manifest.eot_id).sum()) == stats[f"{split}_docs"]
    assert sum(s.split == "train" for s in manifest.shards) == -(-manifest.train_tokens // 1024)


def test_prepare_metrics(prepared):
    _, _, _, manifest = prepared
    metrics = prepare_metrics(manifest)
    assert metrics["data/docs_out"] == 40
    assert metrics["data/train_tokens"] == manifest.train_tokens
    assert metrics["data/holdout_tokens"] == manifest.holdout_tokens


def test_prepare_when_everything_is_filtered(tmp_path):
    root = write_corpus(tmp_path / "corpus", ["tiny one\n", "tiny two\n", "0123456789 " * 30 + "\n"])
    config = load_config(None, [f"data.source={root}"])
    source = acquire_source(config.data, tmp_path / "source_manifest.json")
    with pytest.raises(ValueError) as info:
        prepare(Preparing(source, config, tmp_path / "prepared"))
    message = str(info.value)
    assert "no training documents left after cleaning 3 documents" in message
    assert str(root) in message
    assert "'too_short': 2" in message and "'low_alpha': 1" in message
    assert "quality thresholds" in message


def test_data_config_rejects_tiny_shards():
    with pytest.raises(ValueError):
        DataConfig(shard_tokens=10)


def test_prepare_reuses_a_tokenizer_from_file(prepared, tmp_path):
    """Fine-tuning keeps its parent's tokenizer: `tokenizer.from_file` skips training."""
    source, config, out, manifest = prepared
    parent = tmp_path / "parent_tokenizer.json"
    train_tokenizer(iter(synthetic_docs(10, seed=9)), TokenizerConfig(vocab_size=280)).save(str(parent))
    reuse = config.model_copy(update={"tokenizer": config.tokenizer.model_copy(update={"from_file": str(parent)})})
    again = prepare(Preparing(source, reuse, tmp_path / "prepared")).manifest
    assert (tmp_path / "prepared" / "tokenizer.json").read_text() == parent.read_text()
    assert again.vocab_size == 280 != manifest.vocab_size


def test_tokenizer_trains_on_a_bounded_uniform_sample():
    from foundry.pretrain.prepare import _sample

    texts = [f"document {i}\n" for i in range(4000)]
    assert list(_sample(iter(texts), 1.0)) == texts
    sample = list(_sample(iter(texts), 0.25))
    assert 0.22 < len(sample) / len(texts) < 0.28
    assert sample == list(_sample(iter(texts), 0.25))  # by content, the same every time
    assert set(sample) < set(_sample(iter(texts), 0.5))  # a larger budget keeps what a smaller one took
