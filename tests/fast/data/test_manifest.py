"""foundry.data.manifest: a prepared dataset's manifest.json as a typed value, byte for byte as it was written
before the class existed (the bytes are the data version), and still reading manifests of old data versions."""

from __future__ import annotations

import hashlib
import json

import pytest
from helpers_manifests import CHAT, DOCUMENTS, IMAGES, SHARD

from foundry.core.digests import sha256_file
from foundry.core.workload import REGISTERED, named
from foundry.data.hydrate import verify_dataset
from foundry.data.manifest import DatasetManifest, WrongModality


def _readers(manifest: DatasetManifest) -> list[str]:
    """The workloads that read the dataset (one, or its kind is no workload's)."""
    return [name for name in REGISTERED if named(name).reads(manifest)]


@pytest.mark.parametrize("written", [DOCUMENTS, CHAT], ids=["documents", "chat"])
def test_writing_gives_the_bytes_the_old_writer_gave(written, tmp_path):
    old = json.dumps(written, indent=1)
    (tmp_path / "manifest.json").write_text(old)
    manifest = DatasetManifest.read(tmp_path)
    manifest.write(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == old


def test_a_prepared_dataset_reads_and_writes_back_unchanged(tiny_dataset, tmp_path):
    manifest = DatasetManifest.read(tiny_dataset)
    assert manifest.modality == "text" and manifest.kind == "text" and _readers(manifest) == ["text"]
    assert manifest.train_tokens == sum(s.tokens for s in manifest.shards_of("train"))
    assert manifest.write(tmp_path / "manifest.json").read_bytes() == (tiny_dataset / "manifest.json").read_bytes()


def test_a_manifest_from_before_files_and_ledger_were_written_still_verifies(tmp_path):
    """Old data versions list only the shards, with their sha256: hydration checks those."""
    shard = tmp_path / "train_000.bin"
    shard.write_bytes(b"\x01\x00\x02\x00")
    old = {k: v for k, v in DOCUMENTS.items() if k not in ("files", "ledger")}
    old["shards"] = [{**SHARD, "sha256": hashlib.sha256(shard.read_bytes()).hexdigest()}]
    (tmp_path / "manifest.json").write_text(json.dumps(old, indent=1))

    manifest = DatasetManifest.read(tmp_path)
    expected, digest = manifest.checksums()
    assert manifest.files is None and manifest.ledger is None and digest is sha256_file
    assert expected == {"train_000.bin": old["shards"][0]["sha256"]}
    assert verify_dataset(tmp_path) == []
    shard.write_bytes(b"\x01\x00\x02\x01")
    assert verify_dataset(tmp_path) == ["train_000.bin"]


def test_an_unknown_modality_is_refused_naming_it(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({**DOCUMENTS, "modality": "audio"}))
    with pytest.raises(ValueError, match=r"modality is 'audio'.*text and image datasets only") as info:
        DatasetManifest.read(tmp_path)
    assert str(tmp_path / "manifest.json") in str(info.value)


def test_an_image_manifest_round_trips_and_refuses_token_questions(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(IMAGES, indent=1))
    manifest = DatasetManifest.read(tmp_path)
    assert _readers(manifest) == ["image"] and manifest.image_shape == (1, 8, 8)
    assert manifest.write(tmp_path / "again.json").read_text() == json.dumps(IMAGES, indent=1)
    with pytest.raises(WrongModality, match="vocab_size is a field of text datasets.*modality is 'image'"):
        manifest.vocab_size  # noqa: B018 - the read itself is what raises
    with pytest.raises(WrongModality, match="train_tokens"):
        manifest.tokens("train")
    with pytest.raises(WrongModality, match="classes is a field of image datasets"):
        DatasetManifest.model_validate(DOCUMENTS).classes  # noqa: B018


@pytest.mark.parametrize(
    "change, message",
    [
        ({"vocab_size": 300}, "'image' dataset has no vocab_size"),
        ({"classes": None}, "'image' dataset needs classes"),
        ({"kind": "text"}, "kind 'text' does not go with modality 'image'"),
    ],
)
def test_an_image_manifest_holds_image_fields_only(change, message):
    raw = {k: v for k, v in {**IMAGES, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        DatasetManifest.model_validate(raw)


def test_a_text_manifest_still_needs_its_token_fields():
    with pytest.raises(ValueError, match="'text' dataset needs vocab_size"):
        DatasetManifest.model_validate({k: v for k, v in DOCUMENTS.items() if k != "vocab_size"})


def test_a_key_no_foundry_wrote_is_refused(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({**DOCUMENTS, "tokenizer": "bpe"}))
    with pytest.raises(ValueError, match="tokenizer"):
        DatasetManifest.read(tmp_path)
    assert verify_dataset(tmp_path) == ["manifest.json"]  # hydration reports it rather than crashing


def test_counts_name_what_the_manifest_lacks():
    manifest = DatasetManifest.model_validate(CHAT)
    assert manifest.count("train_records") == 2 and manifest.shards_of("train") == []
    with pytest.raises(KeyError, match="not 'train_docs'"):
        manifest.count("train_docs")
