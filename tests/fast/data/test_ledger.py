"""Sticky splits: each data version carries a ledger of its documents' splits, and a data version built on
a parent's ledger keeps them: checked over three versions of a growing corpus, with the GX gate."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from synthetic import overrides, synthetic_docs

from foundry.config import load_config
from foundry.core.preparing import DataBasis, Preparing, Validating
from foundry.data.acquire import acquire_source
from foundry.data.ledger import Ledger, LedgerMismatch, holdout_set
from foundry.data.validate import ValidationFailed, validate_dataset
from foundry.pretrain.prepare import prepare


def splits(folder: Path) -> dict[str, str]:
    with open(folder / "documents.csv", encoding="utf-8") as fh:
        return {row["sha256"]: row["split"] for row in csv.DictReader(fh)}


def version(base: Path, name: str, docs: dict[str, str], parent: Path | None = None, replay: float | None = None):
    """The documents (file name -> text) as a corpus, prepared into `base/name` on `parent`'s ledger."""
    corpus = base / f"{name}-corpus"
    corpus.mkdir()
    for file, text in docs.items():
        (corpus / file).write_text(text)
    config = load_config(None, overrides(corpus))
    source = acquire_source(config.data, base / f"{name}.json")
    manifest = prepare(Preparing(source, config, base / name, basis=DataBasis(parent, replay)))
    return config, base / name, manifest


@pytest.fixture
def corpus():
    """120 distinct documents, named so that each version adds files in between the old ones."""
    return {f"doc{i:03d}.txt": text for i, text in enumerate(synthetic_docs(120, seed=7))}


def test_a_growing_corpus_never_moves_a_document_between_splits(tmp_path, corpus):
    names = sorted(corpus)
    first = {n: corpus[n] for n in names[:40]}
    second = {**first, **{n: corpus[n] for n in names[40:80]}}
    third = {n: corpus[n] for n in names[5:]}  # grows again, and loses five old documents
    config, v1, _ = version(tmp_path, "v1", first)
    _, v2, m2 = version(tmp_path, "v2", second, parent=v1)
    _, v3, m3 = version(tmp_path, "v3", third, parent=v2)

    s1, s2, s3 = splits(v1), splits(v2), splits(v3)
    trained = {sha for s in (s1, s2) for sha, split in s.items() if split == "train"}
    held = {sha for s in (s1, s2) for sha, split in s.items() if split == "holdout"}
    assert not trained & {sha for sha, split in (s2 | s3).items() if split == "holdout"}
    assert not held & {sha for sha, split in (s2 | s3).items() if split == "train"}
    assert m2.lineage["new_docs"] == 40 and m3.lineage["new_docs"] == 40
    # New documents got their own holdout share, and the ledger remembers the five that left.
    assert any(s3[sha] == "holdout" for sha in set(s3) - set(s2))
    ledger = Ledger.read(v3, config.data.near_dup_num_perm)
    assert len(ledger) == 120 and set(s1) | set(s2) | set(s3) == set(ledger.shas)
    assert ledger.shas[:40] == Ledger.read(v1, config.data.near_dup_num_perm).shas  # ancestors' rows first
    for data_dir, parent in ((v2, v1), (v3, v2)):
        report = validate_dataset(Validating(data_dir, config, tmp_path / "report.json", parent=parent))
        assert report.suites["lineage"].success


def test_without_the_ledger_the_same_growth_leaks_and_the_gate_says_so(tmp_path, corpus):
    """The fault this guards against: splitting the grown corpus afresh moves documents between the splits
    (training documents into the holdout, or holdout documents into training). The gate, given the parent,
    refuses such a data version and names the pairs it found."""
    names = sorted(corpus)
    config, v1, _ = version(tmp_path, "v1", {n: corpus[n] for n in names[:40]})
    _, fresh, _ = version(tmp_path, "fresh", corpus)  # no parent: the old rule
    before = splits(v1)
    moved = [sha for sha, split in splits(fresh).items() if before.get(sha, split) != split]
    assert moved
    with pytest.raises(ValidationFailed, match=r"lineage: expect_column_pair_values_to_be_in_set.*unexpected"):
        validate_dataset(Validating(fresh, config, tmp_path / "report.json", parent=v1))


def test_the_same_documents_on_their_own_ledger_are_the_same_data(tmp_path, corpus):
    config, v1, m1 = version(tmp_path, "v1", corpus)
    source = acquire_source(config.data, tmp_path / "again.json")  # the same folder: the same manifest
    m2 = prepare(Preparing(source, config, tmp_path / "again", basis=DataBasis(v1)))
    again = tmp_path / "again"
    assert m2.manifest.files == m1.manifest.files
    assert (again / "manifest.json").read_bytes() == (v1 / "manifest.json").read_bytes()
    trained = sum(1 for split in splits(v1).values() if split == "train")
    assert m2.lineage == {
        "new_docs": 0,
        "ledger_docs_present": 120,
        "replayed_docs": trained,
        "not_replayed_docs": 0,
    }


def test_new_documents_are_deduplicated_against_the_ledger(tmp_path, corpus):
    names = sorted(corpus)
    old = {n: corpus[n] for n in names[:40]}
    _, v1, _ = version(tmp_path, "v1", old)
    # A near copy of an old document that is no longer in the source, and an exact copy under a name
    # that comes first in corpus order: both repeat what the ledger lists.
    edited = corpus[names[3]].replace("the end of document 3", "the end of document three")
    grown = {n: corpus[n] for n in names[4:60]} | {"a-copy.txt": corpus[names[10]], "zz-edit.txt": edited}
    _, v2, m2 = version(tmp_path, "v2", grown, parent=v1)
    audit = json.loads((v2 / "audit.json").read_text())
    assert audit["rules"]["near_duplicate"]["documents"] == 1
    assert "an earlier data version" in json.dumps(audit["rules"]["near_duplicate"]["examples"])
    assert audit["rules"]["exact_duplicate"]["documents"] == 1
    assert m2.lineage["new_docs"] == 20


def test_retraining_replays_a_sample_of_the_old_training_documents(tmp_path, corpus):
    names = sorted(corpus)
    _, v1, _ = version(tmp_path, "v1", {n: corpus[n] for n in names[:80]})
    _, v2, m2 = version(tmp_path, "v2", corpus, parent=v1, replay=0.25)
    s1, s2 = splits(v1), splits(v2)
    old_train = [sha for sha, split in s1.items() if split == "train"]
    replayed = [sha for sha in old_train if s2.get(sha) == "train"]
    assert 0 < len(replayed) < len(old_train) / 2 and m2.lineage["replayed_docs"] == len(replayed)
    assert m2.lineage["not_replayed_docs"] == len(old_train) - len(replayed)
    assert {sha for sha, split in s1.items() if split == "holdout"} <= {sha for sha, s in s2.items() if s == "holdout"}
    new_train = [sha for sha, split in s2.items() if split == "train" and sha not in s1]
    assert new_train and len(Ledger.read(v2, 128)) == 120  # the ledger lists the old documents left out too
    _, v2b, _ = version(tmp_path, "v2b", corpus, parent=v1, replay=0.25)
    assert splits(v2b) == s2  # the draw is by content hash: the same parent and corpus replay the same
    _, only_new, _ = version(tmp_path, "only-new", corpus, parent=v1, replay=0.0)
    assert {sha for sha, s in splits(only_new).items() if s == "train"} == set(new_train)


def test_a_ledger_signed_otherwise_is_refused(tmp_path, corpus):
    _, v1, _ = version(tmp_path, "v1", corpus)
    corpus_dir = tmp_path / "v1-corpus"
    config = load_config(None, overrides(corpus_dir, "data.near_dup_num_perm=64"))
    source = acquire_source(config.data, tmp_path / "m.json")
    with pytest.raises(LedgerMismatch, match="near_dup_num_perm"):
        prepare(Preparing(source, config, tmp_path / "out", basis=DataBasis(v1)))


def test_a_data_version_from_before_ledgers_is_built_on_by_its_documents(tmp_path, corpus):
    names = sorted(corpus)
    config, v1, _ = version(tmp_path, "v1", {n: corpus[n] for n in names[:40]})
    legacy = tmp_path / "legacy"
    shutil.copytree(v1, legacy)
    for name in ("ledger.csv", "ledger_minhash.npy"):
        (legacy / name).unlink()
    _, v2, _ = version(tmp_path, "v2", corpus, parent=legacy)
    assert all(splits(v2)[sha] == split for sha, split in splits(v1).items())
    validate_dataset(Validating(v2, config, tmp_path / "report.json", parent=legacy))


def test_a_larger_holdout_fraction_cannot_take_training_documents(tmp_path, corpus):
    """Raising the fraction on a champion's ledger affects new documents only; without enough of them the
    holdout falls short and the gate refuses the data version rather than move training documents."""
    config, v1, _ = version(tmp_path, "v1", corpus)
    raised = load_config(None, overrides(tmp_path / "v1-corpus", "data.holdout_fraction=0.45"))
    source = acquire_source(raised.data, tmp_path / "raised.json")
    prepare(Preparing(source, raised, tmp_path / "raised", basis=DataBasis(v1)))
    assert splits(tmp_path / "raised") == splits(v1)
    with pytest.raises(ValidationFailed, match="holdout_bytes"):
        validate_dataset(Validating(tmp_path / "raised", raised, tmp_path / "report.json", parent=v1))


def test_holdout_set_keeps_the_ledger_and_splits_only_new_documents():
    sticky = {"a" * 64: "train", "b" * 64: "holdout"}
    docs = [("a" * 64, 50), ("b" * 64, 10), ("0" * 64, 20), ("1" * 64, 20)]
    # 20% of 100 bytes: the sticky holdout holds 10, the smallest new hash adds 20.
    assert holdout_set(docs, 0.2, sticky) == {"b" * 64, "0" * 64}
    # The ledger's training document stays in training even when it has the smallest hash.
    assert "a" * 64 not in holdout_set([("a" * 64, 50), ("c" * 64, 50)], 0.4, {"a" * 64: "train"})
