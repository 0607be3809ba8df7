"""`purge_commit` against a real data version: a corpus prepared, committed to a real DVC workspace, cache and
local remote, and hydrated. A copy of it with one holdout document removed by hand (its split line and its table
row, the manifest's digests updated) is committed as the replacement, and the old version deleted."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from helpers_configs import tiny
from synthetic import synthetic_docs

from foundry.core.contracts import DataVersion
from foundry.core.digests import fast_digest
from foundry.core.fs import remove_tree
from foundry.data.hydrate import HydrationError, hydrate_version, listing_path
from foundry.purge.commit import commit, delete_version, kept_objects, place_of
from foundry.purge.stores import Places, Store

CHANGED = ("holdout.jsonl", "documents.csv")  # the files the removed document is in: they "hold the text"


@pytest.fixture(scope="module")
def versioned(tmp_path_factory) -> tuple[Path, DataVersion]:
    """A home holding one data version in its workspace, DVC cache, local remote and a hydrated copy."""
    from foundry.core.preparing import Preparing
    from foundry.data.acquire import acquire_source
    from foundry.data.versioning import version_dataset
    from foundry.pretrain.prepare import prepare

    root = tmp_path_factory.mktemp("purge-commit")
    for i, text in enumerate(synthetic_docs(30, seed=5)):
        (root / "source" / f"doc{i:02d}.txt").parent.mkdir(parents=True, exist_ok=True)
        (root / "source" / f"doc{i:02d}.txt").write_text(text)
    config = tiny(f"data.source={root / 'source'}")
    manifest = acquire_source(config.data, root / "source_manifest.json")
    prepare(Preparing(manifest, config, root / "prepared"))
    home = root / "home"
    data = version_dataset(config, root / "prepared", manifest, home)
    hydrate_version(data, home)
    return home, data


@pytest.fixture()
def home(versioned, tmp_path, monkeypatch) -> tuple[Path, DataVersion, Places]:
    original, data = versioned
    copy = tmp_path / "home"
    shutil.copytree(original, copy, symlinks=True)
    monkeypatch.setenv("FOUNDRY_HOME", str(copy))
    data = DataVersion(data_version=data.data_version, remote=str(copy / "dvc-remote"))
    return copy, data, Places.of(copy, {data.remote})


def remote(places: Places) -> Store:
    (store,) = [s for s in places.stores if s.place == "remote"]
    return store


def without_one_document(dataset: Path, out: Path) -> Path:
    """A copy of the dataset with the first holdout document gone from its split file and its table."""
    shutil.copytree(dataset, out)
    for name in CHANGED:
        lines = (out / name).read_bytes().splitlines(keepends=True)
        drop = 0 if name.endswith(".jsonl") else next(n for n, row in enumerate(lines) if b",holdout," in row)
        (out / name).unlink()  # hydrated files are read-only hard links into the cache
        (out / name).write_bytes(b"".join(lines[:drop] + lines[drop + 1 :]))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"].update({name: fast_digest(out / name) for name in CHANGED})
    (out / "manifest.json").unlink()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def workspace_state(home: Path) -> dict[str, str]:
    workspace = home / "workspace"
    files = [workspace / "dvc.lock", workspace / "params.yaml", *(workspace / "prepared").rglob("*")]
    return {str(p): md5(p) for p in files if p.is_file()}


def test_an_unchanged_copy_commits_to_the_same_version(home, tmp_path):
    """DVC's own hashing: the version `commit` gives is the one `version_dataset` gave for the same files."""
    home, data, places = home
    assert commit(places, home / "hydrated" / data.data_version, [remote(places)]) == data.data_version


def test_the_committed_version_hydrates_from_the_remote_on_a_bare_node(home, tmp_path):
    home, data, places = home
    before = workspace_state(home)
    staged = without_one_document(home / "hydrated" / data.data_version, tmp_path / "staged")
    mirror = Store("remote", tmp_path / "mirror")  # a second local remote, empty until now
    mirror.root.mkdir()
    version = commit(places, staged, [remote(places), mirror])
    assert version != data.data_version
    assert commit(places, staged, [remote(places), mirror]) == version  # again: same version, no error
    assert workspace_state(home) == before  # the workspace's checkout, lock and params untouched
    assert not list(home.glob(".purge-*"))  # the throwaway repo is gone
    remove_tree(home / "hydrated", within=home)  # a node that never hydrated anything
    pulled = hydrate_version(DataVersion(data_version=version, remote=str(mirror.root)), home)
    assert (pulled / "holdout.jsonl").read_bytes() == (staged / "holdout.jsonl").read_bytes()


def test_deleting_the_old_version_leaves_no_copy_of_its_text_and_keeps_what_the_new_one_lists(home, tmp_path):
    home, data, places = home
    old = home / "hydrated" / data.data_version
    staged = without_one_document(old, tmp_path / "staged")
    version = commit(places, staged, [remote(places)])
    holding = {md5(old / name) for name in CHANGED}
    shared = md5(old / "tokenizer.json")
    keep = kept_objects(places, {version})
    assert shared in keep and not holding & keep
    counts = delete_version(places, data.data_version, holding | {shared}, keep)
    for store in places.stores:
        assert not listing_path(store.root, data.data_version).exists()
        assert not any(store.object(m).exists() for m in holding)
        assert store.object(shared).is_file()  # the new version lists it too
        assert counts[place_of(store)] == 3  # the listing and the two text-holding objects
    assert counts["hydrated copy"] == len(list(staged.iterdir())) and not old.exists()
    assert counts["workspace"] > 0 and not (home / "workspace" / "prepared").exists()
    with pytest.raises(HydrationError):
        hydrate_version(data, home)
    again = delete_version(places, data.data_version, holding | {shared}, keep)
    assert set(again) == set(counts) and not any(again.values())  # nothing left to remove, no error
    remove_tree(home / "hydrated", within=home)  # the replacement still hydrates whole from the remote alone
    assert hydrate_version(DataVersion(data_version=version, remote=data.remote), home).is_dir()


def test_a_version_or_object_that_is_not_an_md5_is_refused_before_anything_is_removed(home):
    home, data, places = home
    before = workspace_state(home)
    with pytest.raises(ValueError, match="not a data version"):
        delete_version(places, "../" + data.data_version[3:], set(), set())
    with pytest.raises(ValueError, match="not a DVC object id"):
        delete_version(places, data.data_version, {"../../workspace/dvc.lock"}, set())
    assert workspace_state(home) == before and listing_path(remote(places).root, data.data_version).is_file()


def test_a_staged_folder_that_does_not_match_its_manifest_is_refused(home, tmp_path):
    home, data, places = home
    staged = shutil.copytree(home / "hydrated" / data.data_version, tmp_path / "staged")
    (staged / "holdout.jsonl").unlink()
    (staged / "holdout.jsonl").write_text("{}\n")
    versions = remote(places).versions()
    with pytest.raises(ValueError, match="holdout.jsonl"):
        commit(places, staged, [remote(places)])
    assert remote(places).versions() == versions and not list(home.glob(".purge-*"))
