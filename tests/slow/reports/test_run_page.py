"""What people see of the session's tiny run (the shared `base_model` fixture, no training of its own): the
Prefect flow run's name, artifacts and progress lines through the Prefect client, and the MLflow run's
standard fields, system metrics, model-linked metrics and the version's tags."""

from __future__ import annotations

import json
import re
from uuid import UUID

import pytest


@pytest.fixture(scope="module")
def flow_run(base_model):
    """(config, summary, flow run, its artifacts by key, its log messages)."""
    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, LogFilter, LogFilterFlowRunId

    config, summary = base_model
    flow_run_id = UUID(MlflowClient().get_run(summary.run_id).data.tags["prefect.flow_run_id"])
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200)
    return config, summary, run, {a.key: a for a in artifacts}, [log.message for log in logs]


def test_the_flow_run_is_named_after_its_model_and_data(flow_run):
    _, summary, run, _, _ = flow_run
    assert run.name == f"train-it-gpt-{summary.data_version[:8]}"


def test_the_summary_artifact_is_what_the_terminal_prints(flow_run, foundry_home):
    from foundry.reports.summaries import pipeline_summary

    _, summary, _, artifacts, _ = flow_run
    markdown = artifacts["pipeline-summary"]
    assert markdown.type == "markdown"
    assert pipeline_summary(summary, foundry_home) in markdown.data
    assert "holdout" in markdown.data and "unigram" in markdown.data and summary.model_uri in markdown.data


def test_the_data_stage_table_counts_documents_drops_and_pii(flow_run, foundry_home):
    _, summary, _, artifacts, logs = flow_run
    audit = json.loads((foundry_home / "hydrated" / summary.data_version / "audit.json").read_text())
    table = artifacts["data-stage"]
    assert table.type == "table"
    rows = {(r["what"], r["reason"]): r for r in json.loads(table.data)}
    assert rows[("documents in", "")]["documents"] == audit["docs_in"]
    assert rows[("documents kept", "")]["documents"] == audit["docs_out"]
    pii = audit["rules"]["email"]  # stdlib://email is full of addresses
    assert rows[("PII replaced", "email")]["spans"] == pii["spans"] > 0
    dropped = [name for name, rule in audit["rules"].items() if rule["stage"] != "pii"]
    assert dropped and all(any(reason == name for _, reason in rows) for name in dropped)
    assert any(m.startswith(f"data: kept {audit['docs_out']} of {audit['docs_in']} documents") for m in logs)


def test_links_lead_to_the_mlflow_run_and_the_registered_version(flow_run):
    _, summary, _, artifacts, _ = flow_run
    run_link, version_link = artifacts["mlflow-run"], artifacts["model-version"]
    assert run_link.type == version_link.type == "markdown"  # how Prefect 3.9 stores link artifacts
    assert f"/runs/{summary.run_id}" in run_link.data
    assert f"/models/it-gpt/versions/{summary.model_version}" in version_link.data


def test_training_progress_reached_100_percent_with_lines_on_the_way(flow_run):
    config, _, _, artifacts, logs = flow_run
    progress = artifacts["training-progress"]
    assert progress.type == "progress" and float(progress.data) == 100.0
    total = config.train.max_steps
    assert progress.description.startswith(f"step {total}/{total} (100%)")
    steps = [int(m.group(1)) for line in logs if (m := re.match(rf"step (\d+)/{total} \(\d+%\)  loss", line))]
    assert steps == sorted(steps) and steps[-1] == total
    assert any(0 < s < total for s in steps), steps  # reported while it ran, not only at the end


def test_lightning_lines_reach_the_prefect_run(flow_run):
    *_, logs = flow_run
    assert any("`Trainer.fit` stopped" in m for m in logs)
    assert not any("litlogger" in m for m in logs)


def test_the_mlflow_run_carries_standard_fields_and_system_metrics(base_model):
    from mlflow import MlflowClient

    from foundry.runtime.tracking import git_state

    _, summary = base_model
    run = MlflowClient().get_run(summary.run_id)
    tags = run.data.tags
    assert tags["mlflow.user"] and tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.source.name"]
    commit = git_state()["git_commit"]
    assert commit != "unknown" and tags["mlflow.source.git.commit"] == commit and "git_commit" not in tags
    for key in ("system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"):
        assert key in run.data.metrics, sorted(k for k in run.data.metrics if k.startswith("system/"))


def test_evaluation_metrics_are_linked_to_the_logged_model(base_model):
    from mlflow import MlflowClient

    _, summary = base_model
    client = MlflowClient()
    version = client.get_model_version("it-gpt", summary.model_version)
    assert version.source.startswith("models:/m-")  # the logged model, registered
    model = client.get_logged_model(version.source.removeprefix("models:/"))
    linked = {m.key: m.value for m in model.metrics}
    assert linked["holdout/bits_per_byte"] == pytest.approx(summary.metrics.bits_per_byte)
    assert len(client.get_metric_history(summary.run_id, "holdout/bits_per_byte")) == 1  # not logged twice


def test_version_tags_are_the_few_a_reviewer_reads(base_model):
    from mlflow import MlflowClient

    from foundry.registry.lineage import recorded_config, recorded_metrics

    config, summary = base_model
    version = MlflowClient().get_model_version("it-gpt", summary.model_version)
    tags = version.tags
    assert {"run_id", "data_version", "data.source", "git_commit", "gate.verdict", "gate.promoted"} <= set(tags)
    assert not [k for k in tags if k.startswith(("holdout/", "version.")) or k == "config"]
    assert all(len(value) <= 200 for value in tags.values())  # no JSON blob to scroll through in the list
    assert recorded_config(version)["registry"]["model_name"] == "it-gpt"
    assert recorded_metrics(version)["holdout/bits_per_byte"] == pytest.approx(summary.metrics.bits_per_byte)
