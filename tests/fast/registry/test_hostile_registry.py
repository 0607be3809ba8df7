"""Values read back from the registry, a manifest or the command line are checked before they name a folder.

The fault: the champion's `data_version` tag became `hydrated/<tag>/`, removed when it did not verify, so a
tag of `../victim` deleted a folder outside the hydration cache (`..` would have wiped the home). Now a data
version is 32 hex digits, a model URI parses (tests/fast/core/test_model_uri.py), a tag that fails stops the run
naming the version and the tag, and no removal leaves the folder it is confined to. The registry tests use the
real embedded MLflow store."""

from __future__ import annotations

import pytest
from helpers_hostile import survived, victim
from helpers_registry import register_tagged

from foundry.core.contracts import DataVersion, RunContext
from foundry.core.fs import OutsideFolder, remove_tree
from foundry.registry.tags import BadTag

DIGEST = "0123456789abcdef0123456789abcdef"  # the shape of DVC's md5 of a `.dir` listing


# --- data versions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["..", "abc/../..", "../victim", "data/prepared", "/etc", DIGEST.upper(), DIGEST[:-1], DIGEST + "0", ""]
)
def test_a_data_version_is_32_lower_case_hex_digits(bad):
    with pytest.raises(ValueError, match="is not a data version"):
        DataVersion(data_version=bad, remote="r")


def test_a_real_digest_is_a_data_version_and_a_cached_one_is_checked_again():
    assert DataVersion(data_version=DIGEST, remote="r").dvc_out["md5"] == f"{DIGEST}.dir"
    # Prefect restores a cached `dataset` result from JSON: the check runs there too
    with pytest.raises(ValueError, match="is not a data version"):
        DataVersion.model_validate_json('{"data_version": "../..", "remote": "r"}')


def test_hydrate_refuses_a_version_that_is_a_path_before_touching_the_disk(tmp_path):
    """Even a `DataVersion` built without validation (`model_construct`) never becomes a path."""
    from foundry.data.hydrate import hydrate_version

    home = tmp_path / "home"
    target = victim(tmp_path / "victim")  # where hydrated/../../victim points
    hostile = DataVersion.model_construct(data_version="../../victim", remote=str(tmp_path / "remote"))
    with pytest.raises(ValueError, match="is not a data version"):
        hydrate_version(hostile, home)
    assert survived(target) and not (home / "hydrated").exists()


def test_foundry_hydrate_refuses_a_path_as_a_usage_error(tmp_path, capsys):
    from foundry.cli import main

    target = victim(tmp_path / "victim")
    assert main(["hydrate", str(target), "--remote", str(tmp_path)]) == 2
    assert "DATA_VERSION" in capsys.readouterr().err and survived(target)


def test_a_run_id_is_one_path_component():
    with pytest.raises(ValueError, match="is not an MLflow run id"):
        RunContext(run_id="../..", dir="/tmp/x", home="/tmp")


# --- guarded removal --------------------------------------------------------------------------------


def test_remove_tree_removes_a_folder_inside(tmp_path):
    inside = victim(tmp_path / "root" / "a" / "b")
    remove_tree(inside, within=tmp_path / "root")
    assert not inside.exists() and (tmp_path / "root" / "a").is_dir()


@pytest.mark.parametrize("where", ["sibling", "itself", "dotdot", "parent"])
def test_remove_tree_refuses_anything_not_strictly_inside(tmp_path, where):
    root = victim(tmp_path / "root")
    target = victim(tmp_path / "sibling")
    path = {
        "sibling": target,
        "itself": root,
        "dotdot": root / ".." / "sibling",
        "parent": root / "..",
    }[where]
    with pytest.raises(OutsideFolder, match="refusing to remove"):
        remove_tree(path, within=root)
    assert survived(root) and survived(target)


def test_remove_tree_refuses_a_symlink_out_and_never_follows_one(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    target = victim(tmp_path / "victim")
    (root / "link").symlink_to(target, target_is_directory=True)
    with pytest.raises(OutsideFolder, match="symbolic link"):
        remove_tree(root / "link", within=root)
    # a link inside a removed tree goes with the tree; what it points to stays
    tree = root / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(target, target_is_directory=True)
    remove_tree(tree, within=root)
    assert not tree.exists() and survived(target)


def test_a_checkpoint_manifest_naming_a_file_outside_its_folder_is_refused(tmp_path):
    """Pruning unlinks the files the manifest lists: an entry is a name in the checkpoint folder, nothing else."""
    import json

    from foundry.checkpointing.manifest import read_manifest

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    outside = victim(tmp_path / "victim")
    entry = {"file": "../victim/precious.txt", "step": 1, "sha256": "0" * 64, "bytes": 7}
    (folder / "manifest.json").write_text(json.dumps({"checkpoints": [entry]}))
    with pytest.raises(ValueError, match="is not a file name in its folder"):
        read_manifest(folder)
    assert survived(outside)


# --- hostile tags on a real registry ----------------------------------------------------------------


@pytest.fixture()
def hostile(tiny_config, tmp_path):
    """A registered champion whose tags an attacker set, and a home whose `victim` folder `../victim` names."""

    def register(name: str, tags: dict[str, str]):
        return register_tagged(tiny_config, name, tags)

    home = tmp_path / "home"
    return register, home, victim(home / "victim")


def test_a_champion_whose_data_version_tag_is_a_path_is_refused_naming_the_version_and_tag(hostile, tmp_path):
    from foundry.registry.parent import champion_data, fetch_champion

    register, home, target = hostile
    register("hostile-data", {"data_version": "../victim", "data.remote": str(tmp_path / "remote")})
    expected = r"models:/hostile-data/1 tag data_version='\.\./victim' is not a data version \(32 hex digits\)"
    with pytest.raises(BadTag, match=expected):
        champion_data("hostile-data", home)  # what a retrain's `dataset` builds on
    with pytest.raises(BadTag, match=expected):
        fetch_champion("hostile-data", home)  # `foundry retrain`
    assert survived(target) and not (home / "hydrated").exists() and not (home / "models").exists()


def test_the_gate_refuses_a_champion_whose_holdout_tag_is_a_path(hostile, tmp_path):
    from foundry.registry.gate import champion_data

    register, home, target = hostile
    champion = register("hostile-gate", {"data_version": "..", "data.remote": str(tmp_path / "remote")})
    with pytest.raises(BadTag, match=r"models:/hostile-gate/1 tag data_version='\.\.'"):
        champion_data(champion)  # the forgetting guard's and the footing check's input
    assert survived(target)


def test_a_base_whose_pretraining_tag_is_a_path_is_refused_before_anything_is_downloaded(hostile, tmp_path):
    from foundry.registry.parent import fetch_version

    register, home, target = hostile
    tags = {"pretrain.data_version": "../victim", "pretrain.data.remote": str(tmp_path / "remote")}
    register("hostile-align", tags)
    with pytest.raises(BadTag, match=r"models:/hostile-align/1 tag pretrain\.data_version='\.\./victim'"):
        fetch_version("models:/hostile-align@champion", home)  # `foundry align` and `foundry finetune`
    assert survived(target) and not (home / "models").exists()


def test_reproduce_refuses_a_version_whose_data_version_tag_is_a_path(hostile, tmp_path):
    from foundry.registry.lineage import training_data

    register, _, target = hostile
    version = register("hostile-reproduce", {"data_version": "../victim", "data.remote": str(tmp_path / "remote")})
    with pytest.raises(BadTag, match=r"models:/hostile-reproduce/1 tag data_version='\.\./victim'"):
        training_data(version)
    assert survived(target)


def test_a_parent_model_tag_that_is_not_a_model_uri_stops_lineage_and_merges(hostile):
    from foundry.registry.lineage import lineage
    from foundry.specialists.merging import parents_of

    register, _, _ = hostile
    version = register("hostile-parent", {"parent_model": "models:/foundry-gpt/1,models:/../../x/1"})
    expected = r"models:/hostile-parent/1 tag parent_model='models:/foundry-gpt/1,models:/\.\./\.\./x/1' is not"
    with pytest.raises(BadTag, match=expected):
        parents_of(version)
    with pytest.raises(BadTag, match=expected):
        lineage("models:/hostile-parent/1")


def test_a_run_id_tag_that_is_not_a_run_id_is_refused(hostile):
    from foundry.registry.lineage import training_run_id

    register, _, _ = hostile
    version = register("hostile-run", {"run_id": "../../runs"})
    with pytest.raises(BadTag, match=r"models:/hostile-run/1 tag run_id='\.\./\.\./runs' is not an MLflow run id"):
        training_run_id(version)
