"""Purge marks (`foundry.data.purged`) and the refusals they drive, against real data versions: a corpus with
two canary documents prepared and committed to a real DVC workspace, cache and local remote ("before"), then
prepared again with the canaries purged ("after", its replacement); an embedded MLflow store of the test's own
(a SQLite file under tmp_path) holding a version registered on "before". No training, no server."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import tracking_uri
from helpers_configs import tiny
from helpers_registry import register_tagged
from helpers_snapshots import Snapshot
from homes import seeded_mlflow_store
from synthetic import synthetic_docs

from foundry.core.contracts import DataVersion, RunContext
from foundry.core.preparing import DataBasis
from foundry.data import purged
from foundry.data.hydrate import HydrationError, hydrate_version
from foundry.data.manifest import DatasetManifest

CANARY = "quokka marmalade"
RECORD = "purge-20270101T120000-0123abcd"
WHEN = "2027-01-01T12:00:00+00:00"


@dataclass
class Versions:
    home: Path
    before: DataVersion  # holds the canaries
    after: DataVersion  # prepared again with them purged
    canaries: set[str]  # their sha256
    config: object
    manifest: object  # the source manifest


def _documents(folder: Path) -> dict[str, str]:
    with open(folder / "documents.csv", newline="") as fh:
        return {r["sha256"]: r["source"] for r in csv.DictReader(fh)}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Versions:
    from foundry.core.preparing import Preparing
    from foundry.data.acquire import acquire_source
    from foundry.data.versioning import version_dataset
    from foundry.pretrain.prepare import prepare

    root = tmp_path_factory.mktemp("marks")
    source = root / "source"
    source.mkdir()
    for i, text in enumerate(synthetic_docs(24, seed=5)):
        if i >= 22:  # two canaries, the first with an e-mail address (an audit example would quote it)
            email = ["jane.doe@example.com"] if i == 22 else []
            text = " ".join([*text.split(" ")[:20], CANARY, *email, *text.split(" ")[20:]])
        (source / f"doc{i:02d}.txt").write_text(text)
    config = tiny(f"data.source={source}")
    manifest = acquire_source(config.data, root / "source_manifest.json")
    home = root / "home"
    prepare(Preparing(manifest, config, root / "before"))
    canaries = {sha for sha, name in _documents(root / "before").items() if name in ("doc22.txt", "doc23.txt")}
    assert len(canaries) == 2
    before = version_dataset(config, root / "before", manifest, home)
    prepare(Preparing(manifest, config, root / "after", basis=DataBasis(purged=frozenset(canaries))))
    after = version_dataset(config, root / "after", manifest, home)
    return Versions(home, before, after, canaries, config, manifest)


@pytest.fixture(scope="module")
def kept(built, tmp_path_factory) -> tuple[Snapshot, Snapshot, Path, object]:
    """The built home as it is, and again with a version registered (as `purge-marks`' champion) on the data that
    holds the canaries, its MLflow store a SQLite file beside it: (plain, registered, the store, the version).
    Each test gets one back at the built home's own path (`versions`, `registry`)."""
    root = tmp_path_factory.mktemp("marks-kept")
    plain, database = Snapshot(root / "plain", built.home), root / "mlflow.db"
    with pytest.MonkeyPatch.context() as monkeypatch, tracking_uri(monkeypatch, seeded_mlflow_store(database)):
        monkeypatch.setenv("FOUNDRY_HOME", str(built.home))
        tags = {"data_version": built.before.data_version, "data.remote": str(built.home / "dvc-remote")}
        version = register_tagged(built.config, "purge-marks", tags)
    return plain, Snapshot(root / "registered", built.home), database, version


@pytest.fixture()
def versions(built, kept, tmp_path, monkeypatch) -> Versions:
    """The built home as it was built, $FOUNDRY_HOME pointing at it."""
    kept[0].restore()
    home = built.home
    monkeypatch.setenv("FOUNDRY_HOME", str(home))
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))  # DVC keys its index by the path
    remote = str(home / "dvc-remote")
    before = DataVersion(data_version=built.before.data_version, remote=remote)
    after = DataVersion(data_version=built.after.data_version, remote=remote)
    return Versions(home, before, after, set(built.canaries), built.config, built.manifest)


@pytest.fixture()
def registry(versions, kept, tmp_path, monkeypatch):
    """A version registered (as `purge-marks`' champion) on the data that holds the canaries."""
    _, registered, database, version = kept
    registered.restore()
    shutil.copy(database, tmp_path / "mlflow.db")  # a new URI: no engine MLflow cached holds the old file open
    with tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"):
        yield version


def purge_mark(version: DataVersion, replaced_by: str | None = None) -> purged.PurgeMark:
    return purged.PurgeMark(data_version=version.data_version, record=RECORD, replaced_by=replaced_by, when=WHEN)


def test_a_mark_round_trips_and_is_rewritten_whole(versions):
    home, before = versions.home, versions.before
    assert purged.mark_of(home, before.data_version) is None
    path = purged.mark(home, purge_mark(before))
    assert path == home / "purged" / f"{before.data_version}.json"
    assert purged.mark_of(home, before.data_version) == purge_mark(before)
    purged.mark(home, purge_mark(before, versions.after.data_version))  # the purge committed the replacement
    assert purged.mark_of(home, before.data_version).replaced_by == versions.after.data_version
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file left beside it


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps({"data_version": "0" * 32, "record": RECORD, "replaced_by": None, "when": WHEN}),  # another's
        json.dumps({"data_version": "X", "record": "../x", "replaced_by": None, "when": WHEN}),
    ],
    ids=["not-json", "another-version", "not-a-mark"],
)
def test_a_malformed_mark_fails_closed(versions, content):
    path = versions.home / "purged" / f"{versions.before.data_version}.json"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(purged.UnreadableMark, match=re.escape(str(path))):
        hydrate_version(versions.before, versions.home)  # never read as "not purged"
    assert not (versions.home / "hydrated" / versions.before.data_version).exists()


def test_a_mark_refuses_a_record_id_that_is_not_one(versions):
    with pytest.raises(ValueError, match="purge record id"):
        purged.PurgeMark(data_version=versions.before.data_version, record="../../etc", when=WHEN)


def test_hydrate_refuses_a_purged_version_naming_the_record_and_its_replacement(versions):
    copy = hydrate_version(versions.before, versions.home)  # hydrated before the purge
    purged.mark(versions.home, purge_mark(versions.before, versions.after.data_version))
    with pytest.raises(HydrationError) as refused:
        hydrate_version(versions.before, versions.home)
    assert str(refused.value) == (
        f"data version {versions.before.data_version} was purged by purge record {RECORD}; "
        f"its replacement is {versions.after.data_version}"
    )
    assert hydrate_version(versions.after, versions.home) != copy  # the replacement hydrates


def test_reproduce_refuses_a_model_trained_on_purged_data(versions, registry):
    from foundry.registry.lineage import training_data

    assert training_data(registry) == versions.before  # unmarked: as before
    purged.mark(versions.home, purge_mark(versions.before))
    with pytest.raises(purged.DataPurged, match=f"models:/purge-marks/1 cannot be reproduced: .* {RECORD}; nothing"):
        training_data(registry)  # as `flows/reproduce.py` asks, before anything runs ($FOUNDRY_HOME)


def test_the_next_runs_parent_ledger_follows_the_replacement(versions, registry, caplog):
    from foundry.registry.parent import champion_data

    purged.mark(versions.home, purge_mark(versions.before, versions.after.data_version))
    with caplog.at_level("INFO", logger="foundry.data.purged"):
        parent = champion_data("purge-marks", versions.home)
    assert parent.data == versions.after and parent.model_uri == "models:/purge-marks/1"
    assert parent.dir == versions.home / "hydrated" / versions.after.data_version
    assert f"using {versions.after.data_version} in its place" in caplog.text


def test_the_next_runs_parent_ledger_is_refused_when_nothing_replaced_it(versions, registry):
    from foundry.registry.parent import champion_data

    purged.mark(versions.home, purge_mark(versions.before))
    with pytest.raises(purged.DataPurged, match=f"purge record {RECORD}; nothing replaced it"):
        champion_data("purge-marks", versions.home)
    assert not (versions.home / "hydrated" / versions.before.data_version).exists()


def test_prepare_drops_purged_documents_counting_them_without_naming_them(versions):
    before = hydrate_version(versions.before, versions.home)
    after = hydrate_version(versions.after, versions.home)
    assert versions.canaries <= set(_documents(before))
    assert not versions.canaries & set(_documents(after))
    assert set(_documents(after)) == set(_documents(before)) - versions.canaries  # every other document kept
    stats = DatasetManifest.read(after).stats
    assert stats["dropped_purged"] == 2 and stats["docs_in"] == DatasetManifest.read(before).stats["docs_in"]
    audit = json.loads((after / "audit.json").read_text())["rules"]
    assert audit["purged"] == {"stage": "purge", "documents": 2, "spans": 0, "examples": []}
    assert "email" not in audit  # dropped before its e-mail address was counted and quoted
    assert not any(CANARY in p.read_text(errors="replace") for p in after.iterdir() if p.suffix != ".bin")


def test_purged_documents_are_the_union_of_every_record(versions):
    home, (a, b) = versions.home, sorted(versions.canaries)
    assert purged.purged_documents(home) == set()
    purged.record_documents(home, RECORD, {a})
    purged.record_documents(home, "purge-20270102T000000-00000000", {a, b})
    assert purged.purged_documents(home) == {a, b}
    assert purged.records_of(home, {b}) == {"purge-20270102T000000-00000000"}
    (home / "purged" / "documents" / f"{RECORD}.json").write_text('["not a sha"]')
    with pytest.raises(purged.UnreadableMark):
        purged.purged_documents(home)  # prepare refuses rather than keep what may be purged


def test_dataset_key_changes_only_when_something_was_purged(versions):
    from foundry.data.versioning import NOT_SHAPING, code_dependencies, dataset_key
    from foundry.runtime.env import PROJECT_ROOT

    config, digest = versions.config, versions.manifest.digest
    code = {n: hashlib.sha256((PROJECT_ROOT / n).read_bytes()).hexdigest() for n in code_dependencies()}
    shaping = {  # the key as it was made before purges existed
        "source_digest": digest,
        "parent_ledger": "",
        "replay_fraction": None,
        "data": config.data.model_dump(mode="json", exclude=NOT_SHAPING),
        "tokenizer": config.tokenizer.model_dump(mode="json"),
        "block_size": config.model.block_size,
        "code": code,
    }
    old = "dataset-" + hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()
    assert dataset_key(config, digest) == dataset_key(config, digest, purged=set()) == old
    one, both = (
        dataset_key(config, digest, purged={min(versions.canaries)}),
        dataset_key(config, digest, purged=versions.canaries),
    )
    assert len({old, one, both}) == 3


def test_the_dataset_tasks_key_reads_the_homes_purges(versions):
    from tasks.data import DatasetJob, _dataset_key

    run = RunContext(run_id="r1", dir=versions.home / "runs" / "r1", home=versions.home)
    params = {"job": DatasetJob(versions.config, versions.manifest, run)}
    unpurged = _dataset_key(None, params)
    purged.record_documents(versions.home, RECORD, versions.canaries)
    assert _dataset_key(None, params) != unpurged
