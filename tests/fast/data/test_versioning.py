"""DVC versioning and hydration against a real DVC workspace and a local-folder remote."""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from foundry.core.contracts import DataVersion, SourceManifest
from foundry.core.digests import fast_digest
from foundry.data.hydrate import HydrationError, _copy_read_only, dvc_listing, hydrate_version, verify_dataset
from foundry.data.versioning import version_dataset


def test_version_is_the_content_hash_and_lands_in_the_remote(versioned, tiny_config, tiny_dataset, tmp_path):
    data, home = versioned
    version = data.data_version
    lock = yaml.safe_load((home / "workspace" / "dvc.lock").read_text())
    out = next(o for o in lock["stages"]["prepare"]["outs"] if o["path"] == "prepared")
    assert out["md5"] == f"{version}.dir" and out["nfiles"] == len(list(tiny_dataset.iterdir()))
    assert (home / "dvc-remote" / "files" / "md5" / version[:2] / f"{version[2:]}.dir").is_file()
    lock = (home / "workspace" / "dvc.lock").read_text()
    assert version in lock and "source_manifest.json" in lock
    # The same content from another home gives the same version.
    again = tmp_path / "again"
    shutil.copytree(tiny_dataset, again)
    other = version_dataset(
        tiny_config, again, SourceManifest.read(tiny_dataset.parent / "source_manifest.json"), tmp_path / "home-b"
    )
    assert other.data_version == version


def test_a_fresh_home_hydrates_exactly_that_version(versioned, tmp_path):
    data, _ = versioned
    node_home = tmp_path / "node"
    target = hydrate_version(data, node_home)
    assert target == node_home / "hydrated" / data.data_version
    assert verify_dataset(target) == []
    assert not [p for p in (node_home / "hydrated").iterdir() if p.name.startswith(".pull-")]
    assert hydrate_version(data, node_home) == target  # cache hit


def test_a_corrupt_hydrated_file_is_detected_and_fetched_again(versioned, tmp_path):
    data, _ = versioned
    node_home = tmp_path / "node"
    target = hydrate_version(data, node_home)
    shard = next(target.glob("train_*.bin"))
    good = shard.read_bytes()
    shard.write_bytes(b"\0" * len(good))
    assert verify_dataset(target) == [shard.name]
    assert hydrate_version(data, node_home) == target
    assert shard.read_bytes() == good


@pytest.mark.parametrize("name", ["tokenizer.json", "manifest.json"])
def test_every_file_is_checked_not_only_the_shards(versioned, tmp_path, name):
    """The tokenizer by the manifest's xxh3-128, the manifest by DVC's md5 of it."""
    data, _ = versioned
    node_home = tmp_path / "node"
    target = hydrate_version(data, node_home)
    path = target / name
    good = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(good.replace(b"1", b"2", 1))  # one byte, still valid JSON
    assert json.loads(path.read_text())
    assert name in verify_dataset(target, dvc_listing(node_home / "hydrated" / ".cache", data.data_version))
    assert hydrate_version(data, node_home) == target
    assert path.read_bytes() == good


def test_the_copy_is_checked_by_the_digests_taken_as_it_was_written(versioned, tmp_path):
    """A hydration hashes each file as it copies it (`hashed`), and the check reads none of those again: a digest
    that disagrees with the manifest is reported though the file on disk is whole."""
    data, _ = versioned
    target = hydrate_version(data, tmp_path / "node")
    shard = next(p.name for p in sorted(target.iterdir()) if p.name.startswith("train_"))
    source = tmp_path / "source.bin"
    source.write_bytes(b"some bytes" * 100_000)
    digest = _copy_read_only(source, tmp_path / "copy.bin")
    assert digest == fast_digest(tmp_path / "copy.bin") == fast_digest(source)
    assert (tmp_path / "copy.bin").stat().st_mode & 0o777 == 0o444  # read-only, as DVC leaves its cache
    assert verify_dataset(target, hashed={shard: fast_digest(target / shard)}) == []
    assert verify_dataset(target, hashed={shard: digest}) == [shard]


def test_where_links_fail_the_second_copy_is_read_again_by_the_check(versioned, tmp_path, monkeypatch):
    """Across file systems the node's file is a copy of the cached object, not the bytes hashed while fetching: no
    digest taken then vouches for it, and it is still checked."""
    from foundry.data import hydrate

    data, _ = versioned

    def cross_device(*_):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(hydrate.os, "link", cross_device)
    out = tmp_path / "out"
    out.mkdir()
    assert hydrate._copy_from_folder(data, out, tmp_path / "cache") == {}
    target = hydrate_version(data, tmp_path / "node")
    assert verify_dataset(target) == [] and all(p.stat().st_nlink == 1 for p in target.iterdir())


def remote_object(data: DataVersion, md5: str) -> Path:
    path = Path(data.remote) / "files" / "md5" / md5[:2] / md5[2:]
    path.chmod(0o644)  # DVC leaves its objects read-only
    return path


def test_a_corrupt_object_in_the_remote_fails_clearly_and_a_repaired_remote_hydrates(versioned, tmp_path):
    """Not only the node's copy: the remote itself serves a shard whose bytes changed."""
    data, _ = versioned
    listing = json.loads(remote_object(data, f"{data.data_version}.dir").read_text())
    shard = next(e for e in listing if e["relpath"].startswith("train_"))
    obj = remote_object(data, shard["md5"])
    good = obj.read_bytes()
    obj.write_bytes(good[:-2] + bytes([good[-2] ^ 1, good[-1]]))  # one bit, same size
    node = tmp_path / "node"
    with pytest.raises(HydrationError, match=rf"failed checksum verification: \['{shard['relpath']}'\]"):
        hydrate_version(data, node)
    hydrated = node / "hydrated"
    assert sorted(p.name for p in hydrated.iterdir()) == [".cache"]  # no copy, no scratch left
    assert not (hydrated / ".cache" / "files" / "md5" / shard["md5"][:2] / shard["md5"][2:]).exists()
    obj.write_bytes(good)  # the remote repaired: the next try fetches again rather than reusing the bad object
    target = hydrate_version(data, node)
    assert verify_dataset(target, dvc_listing(hydrated / ".cache", data.data_version)) == []


def test_a_listing_that_does_not_hash_to_the_version_is_refused(versioned, tmp_path):
    """The `.dir` listing vouches for every file, so it is itself checked against the version it names."""
    data, _ = versioned
    entry = remote_object(data, f"{data.data_version}.dir")
    listing = json.loads(entry.read_text())
    listing[0]["relpath"], listing[1]["relpath"] = listing[1]["relpath"], listing[0]["relpath"]  # still a listing
    entry.write_text(json.dumps(listing, sort_keys=True))
    with pytest.raises(HydrationError, match=f"listing of data version {data.data_version}"):
        hydrate_version(data, tmp_path / "node")
    assert not (tmp_path / "node" / "hydrated" / data.data_version).exists()


def test_a_missing_listing_is_an_error_not_a_skipped_check(versioned, tmp_path):
    data, _ = versioned
    with pytest.raises(HydrationError, match="is not in the cache"):
        dvc_listing(tmp_path / "empty-cache", data.data_version)
    node = tmp_path / "node"
    target = hydrate_version(data, node)
    shutil.rmtree(node / "hydrated" / ".cache")  # nothing vouches for the copy any more: fetched again
    assert hydrate_version(data, node) == target
    assert (node / "hydrated" / ".cache").is_dir()


@pytest.mark.parametrize("relpath", ["../outside", "/etc/outside", "a/../../outside", ""])
def test_a_folder_remotes_listing_that_names_a_file_outside_the_copy_is_refused(tmp_path, relpath):
    """Read without DVC from a folder remote, a listing (which hashes to its version) still cannot place a file
    anywhere but inside the version's folder."""
    raw = json.dumps([{"md5": "0" * 32, "relpath": relpath}]).encode()
    version = hashlib.md5(raw).hexdigest()
    entry = tmp_path / "remote" / "files" / "md5" / version[:2] / f"{version[2:]}.dir"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(raw)
    (tmp_path / "remote" / "files" / "md5" / "00").mkdir()
    (tmp_path / "remote" / "files" / "md5" / "00" / ("0" * 30)).write_bytes(b"x")
    with pytest.raises(HydrationError, match="names a file or object unsafely"):
        hydrate_version(DataVersion(data_version=version, remote=str(tmp_path / "remote")), tmp_path / "node")
    assert not (tmp_path / "outside").exists() and not (tmp_path / "node" / "hydrated" / version).exists()


def test_an_unknown_version_names_the_node_and_the_version(versioned, tmp_path):
    data, _ = versioned
    missing = DataVersion(data_version="0" * 32, remote=data.remote)
    with pytest.raises(HydrationError, match="cannot hydrate data version 0{32}"):
        hydrate_version(missing, tmp_path / "node")
    assert not (tmp_path / "node" / "hydrated" / ("0" * 32)).exists()


def _hydrate_in_process(args):
    from foundry.data.hydrate import hydrate_version
    from foundry.runtime.env import configure_environment

    configure_environment()

    data, home = args
    return str(hydrate_version(data, home))


def test_concurrent_hydrations_of_one_version_agree(versioned, tmp_path):
    import multiprocessing

    data, _ = versioned
    node = tmp_path / "node"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        targets = pool.map(_hydrate_in_process, [(data, node), (data, node)])
    assert targets[0] == targets[1]
    assert verify_dataset(node / "hydrated" / data.data_version) == []
    assert [p.name for p in (node / "hydrated").iterdir() if not p.name.startswith(".")] == [data.data_version]


def test_the_prepare_stage_names_every_project_module_that_makes_the_data():
    """A module missing from dvc.yaml's deps would change the data without changing its key."""
    import subprocess
    import sys

    from foundry.runtime.env import PROJECT_ROOT

    listing = (
        "import sys, foundry.pretrain.prepare, tasks.data_parallel\n"
        "print('\\n'.join(m.__file__ for m in list(sys.modules.values()) if getattr(m, '__file__', None)))"
    )
    loaded = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout.split()
    making = {
        str(Path(f).relative_to(PROJECT_ROOT))
        for f in loaded
        if f.startswith((str(PROJECT_ROOT / "foundry" / "data"), str(PROJECT_ROOT / "foundry" / "pretrain")))
        or f.startswith(str(PROJECT_ROOT / "models"))
        or Path(f) in (PROJECT_ROOT / "foundry" / "digests.py", PROJECT_ROOT / "tasks" / "data_parallel.py")
    }
    making = {f for f in making if not f.endswith("__init__.py")}
    deps = set(yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())["stages"]["prepare"]["deps"])
    assert "foundry/data/privacy/pii_patterns.py" in making and not making - deps, sorted(making - deps)
