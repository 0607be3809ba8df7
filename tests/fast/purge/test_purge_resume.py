"""`foundry purge --apply` stopped half-way and run again, and the places it must refuse rather than call clean:
on the real data version of `test_purge` (its `fleet` fixture: DVC workspace, cache, remote, hydrated copy,
embedded MLflow with a registered model and a child)."""

# ruff: noqa: F811  (the fixtures imported from test_purge are test arguments here)

from __future__ import annotations

import csv
import gzip
import json
import sqlite3
from pathlib import Path

import pytest
from test_purge import (  # noqa: F401  (fixtures)
    CANARY,
    apply,
    canary_home,
    dry_run,
    fleet,
    holding,
    without_the_unreadable_version,
)

from foundry.cli import main
from foundry.core import fs
from foundry.data import purged
from foundry.data.hydrate import listing_path
from foundry.purge import apply as purge_apply
from foundry.purge import commit, search
from foundry.purge import record as purge_record
from foundry.purge.stores import Places
from foundry.runtime import tracking


def failing_once(monkeypatch, when) -> list[int]:
    """`foundry.core.fs.remove_file` raising OSError once, on the first call `when(n, path)` holds for."""
    real, calls = fs.remove_file, []

    def remove_file(path, within):
        calls.append(len(calls) + 1)
        if len(calls) and when(len(calls), Path(path)) and not getattr(remove_file, "failed", False):
            remove_file.failed = True
            raise OSError("disk gone")
        return real(path, within)

    monkeypatch.setattr(fs, "remove_file", remove_file)
    return calls


@pytest.mark.parametrize("where", ["third removal", "first listing"])
def test_a_purge_killed_while_deleting_finishes_when_run_again(fleet, monkeypatch, where):
    without_the_unreadable_version(fleet)
    when = (lambda n, path: n == 3) if where == "third removal" else (lambda n, path: path.suffix == ".dir")
    with monkeypatch.context() as patch:
        failing_once(patch, when)
        with pytest.raises(OSError, match="disk gone"):
            apply(fleet, match=CANARY)
    assert holding(fleet.home / "mlflow", CANARY.encode()) == []  # the artifacts were scrubbed before the delete
    record = apply(fleet, match=CANARY)
    assert record is not None and record.verified
    assert holding(fleet.home, CANARY.encode()) == []
    places = Places.of(fleet.home, {fleet.data.remote})
    assert not any(listing_path(s.root, fleet.data.data_version).exists() for s in places.stores)


def test_a_version_still_listed_is_not_verified(fleet, monkeypatch):
    without_the_unreadable_version(fleet)
    with monkeypatch.context() as patch:
        failing_once(patch, lambda n, path: path.suffix == ".dir")
        with pytest.raises(OSError, match="disk gone"):
            apply(fleet, match=CANARY)
    monkeypatch.setattr(commit, "delete_version", lambda *args: {})  # the listings stay
    record = apply(fleet, match=CANARY)
    assert not record.verified and record.left["data versions still listed"] == 1


def train_canary(fleet) -> tuple[str, str]:
    """(sha256, text) of a canary in the train split."""
    rows = list(csv.DictReader(open(fleet.hydrated / "documents.csv")))
    train = [r for r in rows if r["split"] == "train"]
    line = next(n for n, r in enumerate(train) if r["sha256"] in fleet.canaries)
    text = json.loads((fleet.hydrated / "train.jsonl").read_text().splitlines()[line])["text"]
    return train[line]["sha256"], text


def test_a_document_purge_run_again_after_its_data_went_still_scrubs_the_artifacts(fleet):
    without_the_unreadable_version(fleet)
    sha, text = train_canary(fleet)
    version = fleet.data.data_version
    # What a first run left when it failed after deleting the data version: the mark, the documents, no data.
    record = purge_record.new_record_id()
    purged.record_documents(fleet.home, record, {sha})
    purged.mark(fleet.home, purged.PurgeMark(data_version=version, record=record, when="2026-01-01T00:00:00+00:00"))
    places = Places.of(fleet.home, {fleet.data.remote})
    listed = set(places.files(version).listing.values())
    commit.delete_version(places, version, listed, set())
    (artifact,) = (fleet.home / "mlflow" / "artifacts").rglob("data/train.jsonl")
    lines = artifact.read_text().splitlines()
    assert any(json.loads(line)["text"] == text for line in lines)

    apply(fleet, document=sha)

    after = artifact.read_text().splitlines()
    assert len(after) == len(lines) - 1 and not any(json.loads(line)["text"] == text for line in after)


def test_a_compressed_source_mirror_file_refuses_apply(fleet):
    without_the_unreadable_version(fleet)
    mirror = fleet.home / "sources" / "s3" / "0123456789abcdef"
    (mirror / "docs").mkdir(parents=True)
    (mirror / "docs" / "letters.jsonl.gz").write_bytes(gzip.compress(json.dumps({"text": CANARY}).encode()))
    (mirror / "docs" / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")  # an image: no document
    unchecked = dry_run(fleet, match=CANARY).unchecked
    assert [(u.what, "compressed source mirror file the purge cannot read" in u.why) for u in unchecked] == [
        ("source mirror sources/s3/0123456789abcdef/…", True)
    ]
    with pytest.raises(purge_apply.PurgeRefused, match="compressed source mirror file"):
        apply(fleet, match=CANARY)


def test_nothing_matched_still_refuses_while_a_place_is_unchecked(fleet):
    with pytest.raises(purge_apply.PurgeRefused, match=f"data version {'f' * 32}"):
        apply(fleet, match="no such phrase anywhere")


def test_an_experiment_keeping_artifacts_elsewhere_is_unchecked(fleet, tmp_path):
    client = tracking.client()
    experiment = client.create_experiment("kept-elsewhere", artifact_location=str(tmp_path / "elsewhere"))
    client.create_run(experiment)
    whats = [u.what for u in dry_run(fleet, match=CANARY).unchecked]
    assert whats == [f"data version {'f' * 32}", f"MLflow experiment kept-elsewhere ({experiment})"]


def test_a_model_left_untagged_is_not_verified_and_apply_retrain_exits_1(fleet, monkeypatch):
    without_the_unreadable_version(fleet)
    from foundry.cli import purge as purge_cli

    monkeypatch.setattr(purge_record, "tag_models", lambda *args: [])  # a registry that took no tag
    monkeypatch.setattr(purge_cli, "_retrain", lambda record: 0)  # retraining itself: tests/slow
    code = main(["purge", "--match", CANARY, "--reason", "request 17", "--apply", "--retrain", "--json"])
    assert code == 1


def test_a_model_left_untagged_is_counted_in_the_record(fleet, monkeypatch):
    without_the_unreadable_version(fleet)
    monkeypatch.setattr(purge_record, "tag_models", lambda *args: [])
    record = apply(fleet, match=CANARY)
    assert not record.verified and record.left == {"model versions untagged": 2}


def test_promote_refuses_a_version_a_purge_tagged(fleet):
    from foundry.registry.versions import PurgedModel, promote_manually

    record = purge_record.new_record_id()
    tracking.client().set_model_version_tag("purge-canary", "1", purge_record.TAG, record)
    with pytest.raises(PurgedModel, match=record):
        promote_manually("models:/purge-canary/1", "looks fine", "alice")


def test_a_source_file_name_is_neither_printed_nor_serialised(fleet):
    name = "jane-doe-medical-letter"
    mirror = fleet.home / "sources" / "s3" / "0123456789abcdef"
    (mirror / "docs").mkdir(parents=True)
    (mirror / "docs" / f"{name}.txt").write_text(f"the {CANARY} jar\n")
    found = dry_run(fleet, match=CANARY)
    (hit,) = [h for h in found.elsewhere if h.place == "source mirror"]
    assert hit.where == "sources/s3/0123456789abcdef/…" and hit.path.endswith(f"{name}.txt")
    assert name not in found.model_dump_json() and name not in search.summary(found)


def test_every_apply_vacuums_the_embedded_prefect_store(fleet):
    without_the_unreadable_version(fleet)
    db = fleet.home / "prefect" / "prefect.db"
    db.parent.mkdir()
    connection = sqlite3.connect(db, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("CREATE TABLE artifact (id INTEGER PRIMARY KEY, data TEXT)")
    connection.execute("INSERT INTO artifact (data) VALUES (?)", (f"the {CANARY}",))
    connection.executemany("INSERT INTO artifact (data) VALUES (?)", [(f"row {i}",) for i in range(50)])
    connection.execute("UPDATE artifact SET data = '[purged]' WHERE data LIKE '%quokka%'")  # its vacuum failed
    assert holding(fleet.home / "prefect", CANARY.encode()) != []  # the old row, in the file or its log
    record = apply(fleet, match=CANARY)
    connection.close()
    assert record.removed["vacuumed"] == 1 and holding(fleet.home, CANARY.encode()) == []
