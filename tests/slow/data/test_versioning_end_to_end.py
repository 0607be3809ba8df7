"""DVC versioning end to end: an S3 remote through moto, and `dvc repro` in a fresh checkout giving the
version the flow committed. The local remote and hydration: tests/fast/data/test_versioning.py."""

from __future__ import annotations

import shutil

import pytest
import yaml

from foundry.core.contracts import DataVersion, SourceManifest
from foundry.data.hydrate import HydrationError, hydrate_version, verify_dataset
from foundry.data.versioning import version_dataset


def test_s3_remote_end_to_end_through_moto(s3_env, tiny_config, tiny_dataset, tmp_path):
    s3_env.create_bucket(Bucket="foundry-data")
    config = tiny_config.model_copy(
        update={"data": tiny_config.data.model_copy(update={"remote": "s3://foundry-data/dvc"})}
    )
    staged = tmp_path / "staged"
    shutil.copytree(tiny_dataset, staged)
    data = version_dataset(
        config, staged, SourceManifest.read(tiny_dataset.parent / "source_manifest.json"), tmp_path / "home-a"
    )
    assert data.remote == "s3://foundry-data/dvc"
    keys = [o["Key"] for o in s3_env.list_objects_v2(Bucket="foundry-data")["Contents"]]
    assert f"dvc/files/md5/{data.data_version[:2]}/{data.data_version[2:]}.dir" in keys
    target = hydrate_version(DataVersion(data_version=data.data_version, remote=data.remote), tmp_path / "node")
    assert verify_dataset(target) == [] and (target / "tokenizer.json").is_file()


def test_a_missing_bucket_is_a_clear_hydration_error(s3_env, tmp_path):
    with pytest.raises(HydrationError, match="cannot hydrate data version"):
        hydrate_version(DataVersion(data_version="1" * 32, remote="s3://no-such-bucket/dvc"), tmp_path / "node")


def test_dvc_repro_in_a_fresh_checkout_rebuilds_the_same_version(versioned, tiny_config, tmp_path):
    """The stages of dvc.yaml, run by DVC itself, give the version the flow committed."""
    import os
    import subprocess
    import sys

    from foundry.config import to_yaml
    from foundry.data.versioning import code_dependencies
    from foundry.runtime.env import PROJECT_ROOT

    data, _ = versioned
    checkout = tmp_path / "checkout"
    for name in ["dvc.yaml", *code_dependencies()]:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROJECT_ROOT / name, checkout / name)
    (checkout / "params.yaml").write_text(to_yaml(tiny_config))
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        "FOUNDRY_HOME": str(tmp_path / "fh"),
    }
    dvc = [sys.executable, "-m", "dvc"]
    subprocess.run([*dvc, "init", "--no-scm", "-q"], cwd=checkout, env=env, check=True)
    subprocess.run([*dvc, "repro", "-q"], cwd=checkout, env=env, check=True, timeout=300)
    lock = yaml.safe_load((checkout / "dvc.lock").read_text())
    out = next(o for o in lock["stages"]["prepare"]["outs"] if o["path"] == "prepared")
    assert out["md5"] == f"{data.data_version}.dir"
