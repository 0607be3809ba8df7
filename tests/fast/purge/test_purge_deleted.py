"""`foundry purge --apply` where a data version cannot be rewritten (every holdout document matches, so the rewrite
would leave the holdout empty): the version is deleted, not rewritten, end to end. And what `--retrain` plans from
a record (foundry/purge/retrain.py). The `fleet` of tests/fast/purge/test_purge.py: real DVC workspace, caches and
remote, embedded MLflow of the test's own; no server, no training."""

# ruff: noqa: F811  (the fixtures imported from test_purge are test arguments here)

from __future__ import annotations

import csv
import json
import re

import pytest
from helpers_registry import register_tagged
from test_purge import (  # noqa: F401  (fixtures: `fleet` and those it is built from)
    apply,
    canary_home,
    fleet,
    holding,
    registered_fleet,
    without_the_unreadable_version,
)

from foundry.core.contracts import DataVersion
from foundry.data.hydrate import HydrationError, hydrate_version, listing_path
from foundry.purge import retrain as purge_retrain
from foundry.purge.record import PurgeRecord
from foundry.runtime import tracking

STORES = ("workspace/.dvc/cache", "hydrated/.cache", "dvc-remote")  # under the home: its caches and its remote


def every_holdout_document(folder) -> tuple[str, list[str]]:
    """A regex matching each holdout document of a prepared folder and no train document; the holdout's texts."""
    texts = {
        split: [json.loads(line)["text"] for line in open(folder / f"{split}.jsonl")] for split in ("train", "holdout")
    }
    pieces = [text[len(text) // 2 : len(text) // 2 + 48] for text in texts["holdout"]]
    pattern = "|".join(re.escape(piece) for piece in pieces)
    assert not any(re.search(pattern, text) for text in texts["train"])  # the train split keeps every document
    return pattern, texts["holdout"]


def test_a_version_whose_holdout_would_be_empty_is_deleted_everywhere_and_refused_naming_the_record(fleet):
    without_the_unreadable_version(fleet)
    version = fleet.data.data_version
    pattern, holdout = every_holdout_document(fleet.hydrated)
    with open(fleet.hydrated / "documents.csv", newline="") as fh:
        assert sorted(r["split"] for r in csv.DictReader(fh)).count("holdout") == len(holdout) > 0
    stores = [fleet.home / store for store in STORES]
    listed = {m for store in stores if (p := listing_path(store, version)).is_file() for m in _md5s(p)}
    assert listed and all(listing_path(store, version).is_file() for store in stores)

    record = apply(fleet, match=pattern)

    assert record.replaced == {version: None} and record.verified
    assert record.models[0] == "models:/purge-canary/1" and "models:/purge-canary/1" in record.lost_champion
    for store in stores:
        assert not listing_path(store, version).exists(), store
        # Every object it listed, its train split's too: no other version lists them, none of its data stays.
        assert [m for m in listed if (store / "files" / "md5" / m[:2] / m[2:]).is_file()] == [], store
    assert not fleet.hydrated.exists()
    assert holding(fleet.home, holdout[0][:48].encode()) == []  # no file under the home holds a holdout text
    with pytest.raises(HydrationError, match=record.record):
        hydrate_version(fleet.data, fleet.home)
    retrain = purge_retrain.plan(record, tracking.client())
    assert retrain.jobs == ()
    assert set(retrain.not_retrained) == {
        "models:/purge-canary/1: its data was deleted, not rewritten",
        "models:/purge-child/1: built from an affected parent",
    }


def _md5s(listing) -> set[str]:
    return {entry["md5"] for entry in json.loads(listing.read_text())} | {listing.parent.name + listing.stem}


def test_the_retrain_plan_takes_the_newest_version_per_name_and_lists_the_others_with_why(
    tiny_config, home, tmp_path, monkeypatch
):
    from conftest import tracking_uri

    old, gone, new, remote = "1" * 32, "2" * 32, "3" * 32, str(tmp_path / "remote")
    with tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"):
        for name, data in (("alpha", old), ("alpha", old), ("beta", gone)):
            register_tagged(tiny_config, name, {"data_version": data, "data.remote": remote})
        register_tagged(tiny_config, "gamma", {"parent_model": "models:/alpha/2"})
        models = ("models:/alpha/1", "models:/alpha/2", "models:/beta/1", "models:/gamma/1")
        record = PurgeRecord(
            record="purge-20260101T000000-0123abcd",
            who="t",
            when="2026-01-01T00:00:00+00:00",
            reason="r",
            criterion="c",
            documents=(),
            replaced={old: new, gone: None},
            removed={},
            models=models,
            lost_champion=(),
            runs=(),
            verified=True,
        )
        planned = purge_retrain.plan(record, tracking.client())
    assert planned.jobs == (
        purge_retrain.RetrainJob(
            name="alpha", trained="models:/alpha/2", data=DataVersion(data_version=new, remote=remote)
        ),
    )
    assert planned.not_retrained == (
        "models:/alpha/1: a newer version of its name is retrained",
        "models:/beta/1: its data was deleted, not rewritten",
        "models:/gamma/1: built from an affected parent",
    )
