"""`foundry gc` against a real DVC workspace, cache and remote and an embedded MLflow store of the test's own (a
SQLite file under tmp_path: --apply deletes runs, so no other test's runs may be in reach). A registered version
and its data survive --apply and hydrate; a data version, hydrated copy, checkpoint, run, source mirror and model
download that nothing references are listed by the dry run (nothing deleted) and removed by --apply; links
planted in a candidate are not followed; a registry that cannot be read stops gc before anything goes. No
training, no server but a loopback one that answers 503."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from conftest import failing_mlflow_server, tracking_uri
from helpers_hostile import survived, victim
from helpers_registry import register_tagged
from helpers_snapshots import Snapshot
from homes import seeded_mlflow_store

from foundry.cli import main
from foundry.core.contracts import DataVersion, SourceManifest
from foundry.core.fs import OutsideFolder, remove_file
from foundry.data.hydrate import dvc_listing, hydrate_version, listing_path, verify_dataset
from foundry.data.remote import digest_of
from foundry.data.versioning import version_dataset
from foundry.gc import collect as gc
from foundry.registry import lineage
from foundry.runtime import tracking

EXPERIMENT = "foundry"  # tiny.yaml's registry.experiment


@dataclass
class Fleet:
    home: Path
    kept: DataVersion  # registered, and checked out in the workspace
    dropped: DataVersion  # nothing refers to it
    kept_run: str
    running_run: str
    dropped_run: str

    def workspace_listing(self, data: DataVersion) -> Path:
        return listing_path(self.home / "workspace" / ".dvc" / "cache", data.data_version)


def files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_size for p in root.rglob("*") if not p.is_dir()}


def staged_copy(tiny_dataset: Path, folder: Path, source: str) -> Path:
    """The tiny dataset, its manifest saying another `source`: another data version that still verifies."""
    shutil.copytree(tiny_dataset, folder)
    manifest = folder / "manifest.json"
    manifest.chmod(0o644)
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "source": source}, indent=1))
    return folder


@pytest.fixture(scope="module")
def versions(tiny_config, tiny_dataset, tmp_path_factory) -> tuple[Path, DataVersion, DataVersion]:
    """A home with two data versions in its DVC workspace, cache and remote, both hydrated: (home, kept, dropped);
    the one committed last is the workspace's. Each test works on a copy of it."""
    root = tmp_path_factory.mktemp("gc-versions")
    home = root / "home"
    manifest = SourceManifest.read(tiny_dataset.parent / "source_manifest.json")
    dropped = version_dataset(tiny_config, staged_copy(tiny_dataset, root / "b", "old"), manifest, home)
    kept = version_dataset(tiny_config, staged_copy(tiny_dataset, root / "a", "new"), manifest, home)
    for data in (kept, dropped):
        hydrate_version(data, home)
    return home, kept, dropped


@pytest.fixture(scope="module")
def registered(versions, tiny_config, tmp_path_factory) -> tuple[Fleet, Snapshot, Path]:
    """A copy of `versions`' home with what gc weighs: a registered version on the kept data, a run still running,
    a failed run on the dropped data, run files, a checkpoint, a source mirror and model copies; its embedded
    MLflow store a SQLite file beside it: (the fleet, a snapshot of its home, the store). Built once; each test
    gets it back at the same paths (`fleet`)."""
    root = tmp_path_factory.mktemp("gc-fleet")
    home, database = root / "home", root / "mlflow.db"
    shutil.copytree(versions[0], home, symlinks=True)  # the remote stays where it is: gc only reads it
    kept, dropped = versions[1:]
    with pytest.MonkeyPatch.context() as monkeypatch, tracking_uri(monkeypatch, seeded_mlflow_store(database)):
        monkeypatch.setenv("FOUNDRY_HOME", str(home))
        data_tags = {"data_version": kept.data_version, "data.remote": kept.remote}
        kept_run = register_tagged(tiny_config, "gc-kept", data_tags).run_id
        tracking.client().set_terminated(kept_run, "FINISHED")
        running_run = tracking.start_pipeline_run(tiny_config, run_name="still running")  # this process: alive
        dropped_run = tracking.start_pipeline_run(tiny_config, run_name="failed long ago")
        tracking.set_tags(dropped_run, {"data_version": dropped.data_version, "data.remote": dropped.remote})
        tracking.end_run(dropped_run, ok=False)
    for run_id in (kept_run, running_run, dropped_run):
        (home / "runs" / run_id).mkdir(parents=True)
        (home / "runs" / run_id / "loss.png").write_bytes(b"x" * 100)
    (home / "checkpoints" / "0123456789abcdef").mkdir(parents=True)
    (home / "checkpoints" / "0123456789abcdef" / "last.ckpt").write_bytes(b"w" * 1000)
    mirror = home / "sources" / "http" / digest_of("http://127.0.0.1:1/gone.tar.gz")
    mirror.mkdir(parents=True)
    (mirror / "gone.txt").write_text("downloaded once")
    (mirror.parent / f"{mirror.name}.origin.json").write_text("{}")
    for folder in ("gc-kept-v1", "deleted-model-v3"):
        (home / "models" / folder).mkdir(parents=True)
        (home / "models" / folder / "model.pt").write_bytes(b"m" * 500)
    fleet = Fleet(home, kept, dropped, kept_run, running_run, dropped_run)
    return fleet, Snapshot(root / "pristine", home), database


@pytest.fixture()
def fleet(registered, tmp_path, monkeypatch) -> Fleet:
    """`registered` put back in place, its store copied to a path of the test's own (--apply deletes runs):
    FOUNDRY_HOME and the tracking URI point at them."""
    built, snapshot, database = registered
    snapshot.restore()
    shutil.copy(database, tmp_path / "mlflow.db")  # a new URI: no engine MLflow cached holds the old file open
    monkeypatch.setenv("FOUNDRY_HOME", str(built.home))
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))  # DVC keys its index by the path
    with tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"):
        yield replace(built)


def collect(fleet: Fleet, apply: bool = False) -> gc.Plan | gc.Outcome:
    planned = gc.plan(fleet.home, EXPERIMENT, keep_last=0, min_age_s=0)
    return gc.apply(planned, fleet.home) if apply else planned


def test_the_dry_run_lists_what_nothing_references_and_deletes_nothing(fleet):
    before = files(fleet.home)
    planned = collect(fleet)
    listed = {(item.kind, item.ref) for item in planned.items}
    dropped = fleet.dropped.data_version
    assert listed == {
        ("data version", dropped),
        ("hydrated copy", dropped),
        ("hydration cache", dropped),
        ("checkpoints", "0123456789abcdef"),
        ("source mirror", digest_of("http://127.0.0.1:1/gone.tar.gz")),
        ("model copy", "deleted-model-v3"),
        ("mlflow run", fleet.dropped_run),
        ("run files", fleet.dropped_run),
    }
    assert planned.bytes > 0 and files(fleet.home) == before
    assert tracking.client().get_run(fleet.dropped_run).info.lifecycle_stage == "active"


def test_apply_removes_them_and_the_registered_version_still_hydrates_and_traces(fleet, tmp_path, capsys):
    artifacts = Path(tracking.client().get_run(fleet.dropped_run).info.artifact_uri.removeprefix("file://"))
    assert artifacts.is_dir()
    assert main(["gc", "--keep-last", "0", "--min-age-minutes", "0", "--apply"]) == 0
    printed = capsys.readouterr().out
    assert "removed 8 items" in printed and "reclaimed" in printed
    assert not fleet.workspace_listing(fleet.dropped).exists()
    assert not (fleet.home / "hydrated" / fleet.dropped.data_version).exists()
    assert not (fleet.home / "checkpoints" / "0123456789abcdef").exists() and not artifacts.exists()
    assert tracking.client().get_run(fleet.dropped_run).info.lifecycle_stage == "deleted"
    assert sorted(p.name for p in (fleet.home / "runs").iterdir()) == sorted([fleet.kept_run, fleet.running_run])
    assert [p.name for p in (fleet.home / "models").iterdir()] == ["gc-kept-v1"]
    # What the kept version needs is whole: its listing and data in the workspace, its hydrated copy, its
    # run's config (what `reproduce` reads first), and the remote, from which a fresh node hydrates it.
    assert fleet.workspace_listing(fleet.kept).is_file()
    cache = fleet.home / "hydrated" / ".cache"
    assert verify_dataset(hydrate_version(fleet.kept, fleet.home), dvc_listing(cache, fleet.kept.data_version)) == []
    assert lineage.lineage("models:/gc-kept/1")[0].config["registry"]["experiment"] == EXPERIMENT
    assert verify_dataset(hydrate_version(fleet.kept, tmp_path / "node")) == []
    assert collect(fleet).items == ()  # nothing left to collect


def test_links_planted_in_or_as_a_candidate_are_not_followed(fleet, tmp_path):
    outside = victim(tmp_path / "outside")
    os.symlink(outside, fleet.home / "hydrated" / fleet.dropped.data_version / "escape")
    os.symlink(outside, fleet.home / "hydrated" / ("f" * 32))  # a "hydrated copy" that is a link
    os.symlink(outside, fleet.home / "checkpoints" / "fedcba9876543210")
    outcome = collect(fleet, apply=True)
    assert survived(outside) and (fleet.home / "hydrated" / ("f" * 32)).is_symlink()
    assert (fleet.home / "checkpoints" / "fedcba9876543210").is_symlink()
    assert ("hydrated copy", fleet.dropped.data_version) in {(i.kind, i.ref) for i in outcome.removed}


def test_a_registry_that_cannot_be_read_deletes_nothing(fleet, monkeypatch):
    planned = collect(fleet)
    before = files(fleet.home)
    with failing_mlflow_server(monkeypatch, "MLFLOW_TRACKING_URI"):
        with pytest.raises(gc.RegistryUnreadable, match="deletes nothing"):
            gc.apply(planned, fleet.home)
        with pytest.raises(gc.RegistryUnreadable):
            gc.plan(fleet.home, EXPERIMENT, keep_last=0, min_age_s=0)
    assert files(fleet.home) == before


def test_the_last_runs_and_recent_files_are_kept(fleet):
    old = time.time() - 7200
    checkpoint = fleet.home / "checkpoints" / "0123456789abcdef"
    for path in (checkpoint / "last.ckpt", checkpoint):
        os.utime(path, (old, old))
    refs = {(i.kind, i.ref) for i in gc.plan(fleet.home, EXPERIMENT, keep_last=3, min_age_s=3600).items}
    # The three runs are the last three: the dropped run and its data stay; files of the last hour stay.
    assert refs == {("checkpoints", "0123456789abcdef")}


def test_remove_file_refuses_links_folders_and_paths_outside(tmp_path):
    root, outside = tmp_path / "root", victim(tmp_path / "outside")
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f").write_text("collected")
    (root / "link").symlink_to(outside / "precious.txt")
    for path in (root / "link", root / "sub", root / ".." / "outside" / "precious.txt"):
        with pytest.raises(OutsideFolder):
            remove_file(path, within=root)
    remove_file(root / "sub" / "f", within=root)
    assert survived(outside) and not (root / "sub" / "f").exists() and (root / "link").is_symlink()


def test_a_run_running_in_another_experiment_keeps_its_data(fleet):
    from foundry.gc.refs import running_everywhere

    client = tracking.client()
    elsewhere = client.create_run(
        tracking.experiment_id("another-team"), tags={"data_version": fleet.dropped.data_version}
    )
    assert elsewhere.info.run_id in {run.info.run_id for run in running_everywhere(client)}
    refs = {(item.kind, item.ref) for item in collect(fleet, apply=True).removed}
    assert not refs & {
        (kind, fleet.dropped.data_version) for kind in ("data version", "hydrated copy", "hydration cache")
    }
    assert (
        fleet.workspace_listing(fleet.dropped).is_file()
        and (fleet.home / "hydrated" / fleet.dropped.data_version).is_dir()
    )


def test_gc_refuses_the_purge_records_experiment(fleet, capsys):
    from foundry.purge.record import EXPERIMENT as PURGES

    record = tracking.client().create_run(tracking.experiment_id(PURGES)).info.run_id
    tracking.client().set_terminated(record, "FINISHED")
    with pytest.raises(gc.NotCollectable, match="purge records"):
        gc.plan(fleet.home, PURGES, keep_last=0, min_age_s=0)
    with pytest.raises(gc.NotCollectable):
        gc.apply(replace(collect(fleet), experiment=PURGES), fleet.home)
    assert main(["gc", "--keep-last", "0", "--apply", "--set", f"registry.experiment={PURGES}"]) == 2
    assert "purge records" in capsys.readouterr().err
    assert tracking.client().get_run(record).info.lifecycle_stage == "active"


def test_fleet_tasks_never_cache_their_results():
    from prefect import Task
    from prefect.cache_policies import NO_CACHE

    import tasks.evaluate
    import tasks.gc
    import tasks.purge

    found = [t for m in (tasks.gc, tasks.purge, tasks.evaluate) for t in vars(m).values() if isinstance(t, Task)]
    assert len(found) > 3 and [t.name for t in found if t.cache_policy is not NO_CACHE] == []
