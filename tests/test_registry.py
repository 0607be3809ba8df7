"""Registration against a real MLflow store: all or nothing, and aliases set by the gate."""

from __future__ import annotations

import pytest

from foundry import tracking
from foundry.contracts import GateDecision, Promotion
from foundry.registry import versions as registry


@pytest.fixture()
def run_id(tiny_config):
    return tracking.start_pipeline_run(tiny_config, run_name="registry-test")


def test_register_tags_the_version_and_promote_sets_aliases(run_id, tmp_path):
    name = "reg-ok"
    version = registry.register(
        f"runs:/{run_id}/none", name, run_id, {"data_version": "abc", "holdout/bits_per_byte": "2.0"}
    )
    assert version == "1"
    result = registry.promote(name, version, True, "no champion yet")
    assert result == Promotion(promoted=True, verdict="no champion yet")
    client = tracking.client()
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"
    assert client.get_model_version(name, "1").tags["data_version"] == "abc"


def test_manual_review_mode_leaves_a_challenger(run_id):
    name = "reg-manual"
    version = registry.register(f"runs:/{run_id}/none", name, run_id, {})
    result = registry.promote(name, version, False, "no champion yet")
    assert result.promoted is False
    assert registry.champion(name) is None
    assert str(tracking.client().get_model_version_by_alias(name, "challenger").version) == version


def test_a_version_whose_tags_fail_is_deleted(run_id):
    name = "reg-fail"
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException):
        registry.register(f"runs:/{run_id}/none", name, run_id, {"config": "x" * 200_000})
    assert tracking.client().search_model_versions(f"name='{name}'") == []


def test_pipeline_run_carries_lineage_params_and_versions(run_id, tiny_config):
    run = tracking.client().get_run(run_id)
    assert run.data.params["train.max_steps"] == str(tiny_config.train.max_steps)
    assert run.data.tags["git_dirty"] in ("true", "false") and run.data.tags["mlflow.user"]
    assert run.data.tags["version.torch"].startswith("2.13.0")
    assert run.info.artifact_uri.startswith("file://")


def test_manual_promotion_records_who_why_and_the_replaced_champion(run_id):
    name = "reg-review"
    first = registry.register(f"runs:/{run_id}/none", name, run_id, {})
    registry.promote(name, first, True, "no champion yet")
    second = registry.register(f"runs:/{run_id}/none", name, run_id, {})
    registry.promote(name, second, False, "left for review")
    record = registry.promote_manually(f"models:/{name}@challenger", "reviewed generations", "alice")
    assert record["version"] == second and record["replaced_champion"] == first
    tags = tracking.client().get_model_version(name, second).tags
    assert tags["promoted_by"] == "alice" and tags["promotion_reason"] == "reviewed generations"
    assert str(registry.champion(name).version) == second


@pytest.mark.parametrize("uri", ["runs:/abc/model", "models:/only-a-name"])
def test_resolve_rejects_uris_that_name_no_version(uri):
    with pytest.raises(ValueError, match="models:/NAME/VERSION"):
        registry.resolve(uri)


def test_gate_tags_record_inputs_and_verdict():
    tags = GateDecision(
        passed=False,
        make_champion=False,
        verdict="worse",
        champion_bits_per_byte=1.5,
        champion_version="3",
        challenger_bits_per_byte=1.6,
        min_improvement=0.01,
    ).tags()
    assert tags == {
        "gate.verdict": "worse",
        "gate.passed": "false",
        "gate.challenger_bits_per_byte": "1.600000",
        "gate.champion_bits_per_byte": "1.500000",
        "gate.champion_version": "3",
        "gate.min_improvement": "0.01",
    }


def test_config_and_metrics_are_read_from_the_training_run_or_from_tags_of_older_versions(run_id, tiny_config):
    """Versions now carry neither; versions registered before copied both into tags, and are read from there."""
    import json

    from foundry.registry.lineage import recorded_config, recorded_metrics

    client = tracking.client()
    tracking.log_metrics(run_id, {"holdout/bits_per_byte": 2.25, "train/loss": 3.0})
    now = client.get_model_version("reg-now", registry.register(f"runs:/{run_id}/none", "reg-now", run_id, {}))
    assert recorded_config(now) == json.loads(tiny_config.model_dump_json())  # the run's config.json
    assert recorded_metrics(now) == {"holdout/bits_per_byte": 2.25}
    bare = client.create_run(tracking.experiment_id("foundry")).info.run_id  # nothing logged, as before
    legacy = {"config": json.dumps({"train": {"max_steps": 7}}), "holdout/bits_per_byte": "1.500000"}
    old = client.get_model_version("reg-old", registry.register(f"runs:/{bare}/none", "reg-old", bare, legacy))
    assert recorded_config(old) == {"train": {"max_steps": 7}}
    assert recorded_metrics(old) == {"holdout/bits_per_byte": 1.5}
    none = client.get_model_version("reg-none", registry.register(f"runs:/{bare}/none", "reg-none", bare, {}))
    assert recorded_config(none) == {} and recorded_metrics(none) == {}


def test_run_tags_are_set_in_one_call_and_mlflow_fields_come_from_its_context(run_id):
    tracking.set_tags(run_id, {"a": "1", "b": 2})
    tags = tracking.client().get_run(run_id).data.tags
    assert tags["a"] == "1" and tags["b"] == "2"
    assert tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.user"]
    assert tags.get("mlflow.source.git.commit", "unknown") == tracking.git_state()["git_commit"]
