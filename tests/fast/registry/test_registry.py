"""Registration against a real MLflow store: all or nothing, and aliases set by the gate."""

from __future__ import annotations

import pytest
from conftest import failing_mlflow_server

from foundry.core.contracts import Promotion
from foundry.gates.decision import Check, Decision
from foundry.gates.inputs import PretrainInputs
from foundry.registry import versions as registry
from foundry.runtime import tracking


@pytest.fixture()
def run_id(tiny_config):
    return tracking.start_pipeline_run(tiny_config, run_name="registry-test")


def test_publish_tags_the_version_and_sets_aliases(run_id, tmp_path):
    name = "reg-ok"
    tags = {"data_version": "abc", "holdout/bits_per_byte": "2.0"}
    result = registry.publish(f"runs:/{run_id}/none", name, run_id, tags, True, "no champion yet", "the card")
    assert result == Promotion(version="1", promoted=True, verdict="no champion yet")
    client = tracking.client()
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"
    version = client.get_model_version(name, "1")
    assert version.tags["data_version"] == "abc" and version.description == "the card"
    assert version.tags["gate.promoted"] == "true" and version.tags["foundry.publication"] == "complete"


def test_manual_review_mode_leaves_a_challenger(run_id):
    name = "reg-manual"
    result = registry.publish(f"runs:/{run_id}/none", name, run_id, {}, False, "no champion yet")
    assert result.promoted is False
    assert registry.champion(name) is None
    assert str(tracking.client().get_model_version_by_alias(name, "challenger").version) == result.version
    assert tracking.client().get_model_version(name, result.version).tags["gate.promoted"] == "false"


def test_a_version_whose_tags_fail_is_never_created(run_id):
    name = "reg-fail"
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException):
        registry.publish(f"runs:/{run_id}/none", name, run_id, {"config": "x" * 200_000}, True, "v")
    assert tracking.client().search_model_versions(f"name='{name}'") == []


def test_only_a_missing_model_or_alias_means_no_champion(run_id, monkeypatch):
    """The fault: any registry error read as "no champion yet", so the gate passed. Now an error propagates."""
    from mlflow.exceptions import MlflowException

    assert registry.champion("reg-never-registered") is None  # no such model
    registry.publish(f"runs:/{run_id}/none", "reg-no-champion", run_id, {}, False, "v")
    assert registry.champion("reg-no-champion") is None  # a model, no such alias
    with failing_mlflow_server(monkeypatch, "MLFLOW_TRACKING_URI"):
        with pytest.raises(MlflowException, match="503"):
            registry.champion("reg-no-champion")


def test_pipeline_run_carries_lineage_params_and_versions(run_id, tiny_config):
    run = tracking.client().get_run(run_id)
    assert run.data.params["train.max_steps"] == str(tiny_config.train.max_steps)
    assert run.data.tags["git_dirty"] in ("true", "false") and run.data.tags["mlflow.user"]
    assert run.data.tags["version.torch"].startswith("2.13.0")
    assert run.info.artifact_uri.startswith("file://")


def test_manual_promotion_records_who_why_and_the_replaced_champion(run_id):
    name = "reg-review"
    first = registry.publish(f"runs:/{run_id}/none", name, run_id, {}, True, "no champion yet").version
    second = registry.publish(f"runs:/{run_id}/none", name, run_id, {}, False, "left for review").version
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
    inputs = PretrainInputs(
        champion_bits_per_byte=1.5,
        champion_version="3",
        challenger_bits_per_byte=1.6,
        min_improvement=0.01,
        auto_promote=True,
    )
    tags = Decision.of(inputs, {"beats_champion": Check(passed=False)}, "worse").tags()
    assert tags == {
        "gate.verdict": "worse",
        "gate.passed": "false",
        "gate.challenger_bits_per_byte": "1.600000",
        "gate.champion_bits_per_byte": "1.500000",
        "gate.champion_version": "3",
        "gate.min_improvement": "0.01",
        "gate.old_holdout_version": "",
        "gate.challenger_old_bits_per_byte": "",
        "gate.champion_old_bits_per_byte": "",
        "gate.max_regression": "",
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
    # A record that predates train.optimizer, precision, compile, batch_ramp_steps and average_last trained with
    # AdamW, in auto precision, uncompiled, without a ramp or a mean, and is read so (foundry.config.as_recorded).
    predated = {"optimizer": "adamw", "precision": "auto", "compile": False, "batch_ramp_steps": 0, "average_last": 0.0}
    assert recorded_config(old) == {"train": {"max_steps": 7, **predated}}
    assert recorded_metrics(old) == {"holdout/bits_per_byte": 1.5}
    none = client.get_model_version("reg-none", registry.register(f"runs:/{bare}/none", "reg-none", bare, {}))
    assert recorded_config(none) == {} and recorded_metrics(none) == {}


def test_run_tags_are_set_and_mlflow_fields_come_from_its_context(run_id):
    tracking.set_tags(run_id, {"a": "1", "b": 2})
    tags = tracking.client().get_run(run_id).data.tags
    assert tags["a"] == "1" and tags["b"] == "2"
    assert tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.user"]
    commit = tracking.git_state()["git_commit"]
    assert commit != "unknown" and tags["mlflow.source.git.commit"] == commit  # the tests run in a checkout


def test_the_event_of_a_publication_says_what_the_gate_and_the_review_mode_made_of_it():
    from tasks.registry import event_name

    def decision(passed, auto_promote=True):
        inputs = PretrainInputs(challenger_bits_per_byte=1.0, min_improvement=0.0, auto_promote=auto_promote)
        return Decision.of(inputs, {"beats_champion": Check(passed=passed)}, "v")

    promoted, kept = (
        Promotion(version="2", promoted=True, verdict="v"),
        Promotion(version="2", promoted=False, verdict="v"),
    )
    assert event_name(promoted, decision(True)) == "foundry.model.promoted"
    assert event_name(kept, decision(False)) == "foundry.model.refused"
    review = decision(True, auto_promote=False)  # registry.auto_promote: false
    assert event_name(kept, review) == "foundry.model.awaiting-review"
