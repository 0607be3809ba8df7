"""DVC versioning and hydration against a real DVC workspace and a local-folder remote."""

from __future__ import annotations

import shutil

import pytest

from tasks.versioning import HydrationError, hydrate, verify_dataset, version_dataset


@pytest.fixture()
def versioned(tiny_config, tiny_dataset, tmp_path):
    """The tiny dataset committed and pushed from one home; a copy is staged so the fixture stays reusable."""
    home = tmp_path / "home-a"
    staged = tmp_path / "staged"
    shutil.copytree(tiny_dataset, staged)
    source_manifest = tiny_dataset.parent / "source_manifest.json"
    return version_dataset(tiny_config, staged, source_manifest, home), home


def test_version_is_the_content_hash_and_lands_in_the_remote(versioned, tiny_config, tiny_dataset, tmp_path):
    data, home = versioned
    version = data["data_version"]
    assert data["out"]["md5"] == f"{version}.dir" and data["out"]["nfiles"] == len(list(tiny_dataset.iterdir()))
    assert (home / "dvc-remote" / "files" / "md5" / version[:2] / f"{version[2:]}.dir").is_file()
    lock = (home / "workspace" / "dvc.lock").read_text()
    assert version in lock and "source_manifest.json" in lock
    # The same content from another home gives the same version.
    again = tmp_path / "again"
    shutil.copytree(tiny_dataset, again)
    other = version_dataset(tiny_config, again, tiny_dataset.parent / "source_manifest.json", tmp_path / "home-b")
    assert other["data_version"] == version


def test_a_fresh_home_hydrates_exactly_that_version(versioned, tmp_path):
    data, _ = versioned
    node_home = tmp_path / "node"
    target = hydrate(data, node_home)
    assert target == node_home / "hydrated" / data["data_version"]
    assert verify_dataset(target) == []
    assert not [p for p in (node_home / "hydrated").iterdir() if p.name.startswith(".pull-")]
    assert hydrate(data, node_home) == target  # cache hit


def test_a_corrupt_hydrated_file_is_detected_and_fetched_again(versioned, tmp_path):
    data, _ = versioned
    node_home = tmp_path / "node"
    target = hydrate(data, node_home)
    shard = next(target.glob("train_*.bin"))
    good = shard.read_bytes()
    shard.write_bytes(b"\0" * len(good))
    assert verify_dataset(target) == [shard.name]
    assert hydrate(data, node_home) == target
    assert shard.read_bytes() == good


def test_an_unknown_version_names_the_node_and_the_version(versioned, tmp_path):
    data, _ = versioned
    missing = {**data, "data_version": "0" * 32, "out": {**data["out"], "md5": "0" * 32 + ".dir"}}
    with pytest.raises(HydrationError, match="cannot hydrate data version 0{32}"):
        hydrate(missing, tmp_path / "node")
    assert not (tmp_path / "node" / "hydrated" / ("0" * 32)).exists()
