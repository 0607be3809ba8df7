"""Registration against a real MLflow store: all or nothing, and aliases set by the gate."""

from __future__ import annotations

import pytest

from tasks import registry, tracking


@pytest.fixture()
def run_id(tiny_config):
    return tracking.start_pipeline_run(tiny_config, run_name="registry-test")


def test_register_tags_the_version_and_promote_sets_aliases(run_id, tmp_path):
    name = "reg-ok"
    version = registry.register("runs:/%s/none" % run_id, name, run_id, {"data_version": "abc", "holdout/bits_per_byte": "2.0"})
    assert version == "1"
    result = registry.promote(name, version, True, "no champion yet", None, auto=True)
    assert result == {"promoted": True, "verdict": "no champion yet"}
    client = tracking.client()
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"
    assert client.get_model_version(name, "1").tags["data_version"] == "abc"


def test_manual_review_mode_leaves_a_challenger(run_id):
    name = "reg-manual"
    version = registry.register("runs:/%s/none" % run_id, name, run_id, {})
    result = registry.promote(name, version, True, "no champion yet", None, auto=False)
    assert result["promoted"] is False
    assert registry.champion(name) is None
    assert str(tracking.client().get_model_version_by_alias(name, "challenger").version) == version


def test_a_version_whose_tags_fail_is_deleted(run_id):
    name = "reg-fail"
    with pytest.raises(Exception):
        registry.register("runs:/%s/none" % run_id, name, run_id, {"config": "x" * 200_000})
    assert tracking.client().search_model_versions(f"name='{name}'") == []


def test_pipeline_run_carries_lineage_params_and_versions(run_id, tiny_config):
    run = tracking.client().get_run(run_id)
    assert run.data.params["train.max_steps"] == str(tiny_config.train.max_steps)
    assert run.data.tags["git_commit"]
    assert run.data.tags["version.torch"].startswith("2.13.0")
    assert run.info.artifact_uri.startswith("file://")
