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
from homes import seeded_mlflow_store
from test_purge import (  # noqa: F401  (fixtures: `fleet` and those it is built from)
    apply,
    canary_home,
    fleet,
    holding,
    registered_fleet,
    without_the_unreadable_version,
)

from foundry.cli import main
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
    assert retrain.not_retrained == ("models:/purge-canary/1: its data was deleted, not rewritten",)
    assert [(r.model, r.kind) for r in retrain.rebuilds] == [("models:/purge-child/1", "finetune")]


def test_retrain_exits_3_listing_each_derived_version_with_the_command_that_rebuilds_it(fleet, tiny_config, capsys):
    """#55 point 6: `--retrain` cannot rebuild a fine-tune, a merge or an alignment itself; it lists them, parents
    first, each with its command on the retrained parent, and exits 3 so that the purge does not read as done. (The
    data is deleted here, not rewritten: nothing to retrain, so no training runs.)"""
    without_the_unreadable_version(fleet)
    register_tagged(tiny_config, "purge-x", {})  # not affected: a merge input that stays as it is
    chat = {"parent_model": "models:/purge-child/1", "align.method": "sft"}
    register_tagged(tiny_config, "purge-chat", chat)
    merged = {"parent_model": "models:/purge-child/1,models:/purge-x/1", "merge.base": "models:/purge-canary/1"}
    register_tagged(tiny_config, "purge-merged", merged)
    pattern, _ = every_holdout_document(fleet.hydrated)
    capsys.readouterr()

    code = main(["purge", "--match", pattern, "--reason", "request 17", "--apply", "--retrain"])

    out, err = capsys.readouterr()
    assert code == purge_retrain.REBUILDS_LEFT == 3, err
    assert "not retrained: models:/purge-canary/1: its data was deleted, not rewritten" in out
    listed = out[out.index("not rebuilt: 3 version(s)") :].splitlines()[1:4]
    assert listed == [
        "  models:/purge-child/1 (a fine-tune of models:/purge-canary@champion): foundry finetune "
        "<a new version of purge-canary> --config CONFIG --set finetune.model_name=purge-child",
        "  models:/purge-chat/1 (an alignment of models:/purge-child/1): foundry align <purge-child rebuilt above> "
        "--config CONFIG --set align.model_name=purge-chat",
        "  models:/purge-merged/1 (a merge of models:/purge-child/1, models:/purge-x/1): foundry merge "
        "<purge-child rebuilt above> models:/purge-x/1 --base <a new version of purge-canary> --config CONFIG "
        "--set merge.model_name=purge-merged",
    ]
    assert "foundry lineage MODEL_URI --json" in out
    assert "3 derived version(s) still to rebuild" in err and "exit status 3" in err


def _md5s(listing) -> set[str]:
    return {entry["md5"] for entry in json.loads(listing.read_text())} | {listing.parent.name + listing.stem}


def test_the_retrain_plan_takes_the_newest_version_per_name_and_lists_the_others_with_why(
    tiny_config, home, tmp_path, monkeypatch
):
    from conftest import tracking_uri

    old, gone, new, remote = "1" * 32, "2" * 32, "3" * 32, str(tmp_path / "remote")
    with tracking_uri(monkeypatch, seeded_mlflow_store(tmp_path / "mlflow.db")):
        for name, data in (("alpha", old), ("alpha", old), ("beta", gone)):
            register_tagged(tiny_config, name, {"data_version": data, "data.remote": remote})
        register_tagged(tiny_config, "gamma", {"parent_model": "models:/alpha/2"})
        register_tagged(tiny_config, "epsilon", {"parent_model": "models:/delta@champion", "align.method": "dpo"})
        merge = {"parent_model": "models:/gamma/1,models:/zeta/1", "merge.base": "models:/alpha/2"}
        register_tagged(tiny_config, "delta", merge | {"data_version": old, "data.remote": remote})  # not a job
        models = (
            "models:/alpha/1",
            "models:/alpha/2",
            "models:/beta/1",
            "models:/epsilon/1",
            "models:/delta/1",
            "models:/gamma/1",
        )
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
    )
    # Derived versions are rebuilt by hand, parents first, on the retrained version; zeta was not affected.
    assert purge_retrain.commands(planned, record, {"alpha": "models:/alpha/3"}) == [
        "models:/gamma/1 (a fine-tune of models:/alpha/2): foundry finetune models:/alpha/3 --config CONFIG "
        "--set finetune.model_name=gamma",
        "models:/delta/1 (a merge of models:/gamma/1, models:/zeta/1): foundry merge <gamma rebuilt above> "
        "models:/zeta/1 --base models:/alpha/3 --config CONFIG --set merge.model_name=delta",
        "models:/epsilon/1 (an alignment of models:/delta@champion): foundry align <delta rebuilt above> "
        "--config CONFIG --set align.model_name=epsilon",
    ]


def test_a_retrain_of_a_purged_name_is_retrained_from_scratch_then_listed_for_foundry_retrain(
    tiny_config, home, tmp_path, monkeypatch
):
    """A scheduled retrain (`foundry retrain`: the name's champion warm-started, `parent_model` of its own name)
    is not a fine-tune: the name is trained again from its newest from-scratch version, and the retrain is listed
    with `foundry retrain`, which then starts from the retrained champion."""
    from conftest import tracking_uri

    old, new, remote = "1" * 32, "3" * 32, str(tmp_path / "remote")
    with tracking_uri(monkeypatch, seeded_mlflow_store(tmp_path / "mlflow.db")):
        register_tagged(tiny_config, "omega", {"data_version": old, "data.remote": remote})
        register_tagged(
            tiny_config, "omega", {"data_version": old, "data.remote": remote, "parent_model": "models:/omega/1"}
        )
        record = PurgeRecord(
            record="purge-20260101T000000-0123abcd",
            who="t",
            when="2026-01-01T00:00:00+00:00",
            reason="r",
            criterion="c",
            documents=(),
            replaced={old: new},
            removed={},
            models=("models:/omega/1", "models:/omega/2"),
            lost_champion=(),
            runs=(),
            verified=True,
        )
        planned = purge_retrain.plan(record, tracking.client())
    assert [job.trained for job in planned.jobs] == ["models:/omega/1"]
    assert [(r.model, r.kind) for r in planned.rebuilds] == [("models:/omega/2", "retrain")]
    assert purge_retrain.commands(planned, record, {"omega": "models:/omega/3"}) == [
        "models:/omega/2 (a retrain of models:/omega/1): foundry retrain --config CONFIG "
        "--set registry.model_name=omega",
    ]
