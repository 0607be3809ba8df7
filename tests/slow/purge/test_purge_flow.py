"""`foundry purge` as a Prefect flow under a real Prefect server: the summary it returns is its run page's
artifact, and the run pages' own artifacts are searched and rewritten through the Prefect API. And a flow that reads
a registered version refusing a purged one before its first task (the other flows: tests/fast/purge/test_purge_flows.py)."""

from __future__ import annotations

from conftest import tracking_uri
from helpers_purge import (
    deployment_naming,
    named_flow_run,
    prefect_artifacts_scrubbed,
    prefect_places_holding,
    traces_flow,
)
from helpers_registry import register_tagged


def test_the_dry_run_flow_puts_its_summary_on_the_run_page(prefect_harness, tmp_path, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from flows.purge import purge_documents

    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))  # an empty home and registry: nothing matches
    with tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"):
        state = purge_documents(reason="request 17", match="no such phrase anywhere", return_state=True)
    text = state.result()
    assert "no data version holds a matching document" in text and "nothing was changed" in text
    flow_run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    assert artifact.key == "purge-summary" and text in artifact.data


def test_run_page_artifacts_holding_a_document_are_rewritten_through_the_api(prefect_harness, foundry_home):
    prefect_artifacts_scrubbed(foundry_home)


def test_the_gc_flow_puts_the_summary_it_returns_on_the_run_page(prefect_harness, tmp_path, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from flows.gc import collect_garbage

    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))  # an empty home: nothing to collect, a dry run
    with tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"):
        state = collect_garbage(keep_last=0, min_age_minutes=0, return_state=True)
    text = state.result()
    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]))
        )
    assert "reclaim" in text and text in artifact.data


def test_a_flow_run_given_a_purged_version_fails_before_its_first_task_unless_allowed(
    prefect_harness, tiny_config, tmp_path, monkeypatch
):
    """#55 point 6 under a real Prefect server, as a deployment run from the UI would start it: the flow's own
    check, not the CLI's. With `allow_purged` it goes on to its tasks (and stops where the version, registered
    without weights, would be downloaded)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.finetune import finetune
    from foundry.purge import record as purge_record
    from foundry.registry.versions import PurgedModel
    from foundry.runtime import tracking

    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    with tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"):
        version = register_tagged(tiny_config, "purged-base", {})
        tracking.client().set_model_version_tag(version.name, version.version, purge_record.TAG, "purge-x")
        refused = finetune(model="models:/purged-base/1", config=tiny_config, return_state=True)
        allowed = finetune(model="models:/purged-base/1", config=tiny_config, allow_purged=True, return_state=True)
    assert refused.is_failed() and allowed.is_failed()
    assert isinstance(refused.result(raise_on_failure=False), PurgedModel)
    assert not isinstance(allowed.result(raise_on_failure=False), PurgedModel)

    def tasks(state) -> list[str]:
        runs = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        with get_client(sync_client=True) as client:
            return sorted(t.name.rsplit("-", 1)[0] for t in client.read_task_runs(flow_run_filter=runs))

    assert tasks(refused) == []  # refused before any task
    assert "base-model" in tasks(allowed)


def test_a_purge_leaves_the_source_name_in_no_flow_run_parameter_state_message_log_or_event(
    prefect_harness, tmp_path, monkeypatch
):
    """#55 point 6: a flow run on a single-file source (its parameter, a task's failure message, its log lines
    and the state-change events naming the file), and the dry-run purge flow's own parameter; after the purge
    flow's `apply` (its own parameter names the source too, while it runs) Prefect's API shows the name nowhere:
    the harness's store is a SQLite file here, so state messages are rewritten and logs and events deleted in it,
    and nothing is left to list."""
    from flows.purge import purge_documents

    name = "jane_doe_letter.txt"
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    with tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"):
        traces_flow(f"/srv/in/{name}")
        planned = purge_documents(reason="request 17", source=name)
        before = {p.split(" ")[0] for p in prefect_places_holding(name, wait=True)}
        assert {"flow-run-parameters", "task-run-state", "log", "event"} <= before
        assert "flow run parameters" in planned and "delete (in its SQLite file)" in planned
        applied = purge_documents(reason="request 17", source=name, apply=True)
    assert "verified: a second search finds none" in applied and "left, cannot be removed" not in applied
    assert name not in planned + applied
    assert prefect_places_holding(name) == []


def test_a_purge_rewrites_deployment_and_schedule_parameters_and_a_flow_run_named_after_the_source(
    prefect_harness, tmp_path, monkeypatch
):
    """#55 point 6, what the first search missed: a deployment's parameters and its schedule's (a nightly run's
    `data`), and a flow run named after the source (`evaluate-<file>`, as flows/evaluate.py names one) with the
    engine's log lines and events quoting that name. After the purge flow's `apply` none holds the name, and the
    deployment's other parameters are as they were. Failed with the first version of this change: the purge's own
    update of the deployment emitted an event quoting the parameters as they were, stored after its second search
    (which called the store clean)."""
    import time
    from uuid import UUID

    from prefect.client.orchestration import get_client

    from flows.purge import purge_documents

    name = "mary_roe_letter.txt"
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    with tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"):
        deployment = deployment_naming(f"/srv/in/{name}")
        named_flow_run(f"/srv/in/{name}")
        before = {p.split(" ")[0] for p in prefect_places_holding(name, wait=True)}
        assert {"deployment-parameters", "schedule-parameters", "flow-run-name", "log", "event"} <= before
        planned = purge_documents(reason="request 19", source=name)
        for kind in ("deployment parameters", "deployment schedule parameters", "flow run name"):
            assert kind in planned
        applied = purge_documents(reason="request 19", source=name, apply=True)
    assert "verified: a second search finds none" in applied and "left, cannot be removed" not in applied
    time.sleep(6)  # the server stores events every 5 s: an event the purge's own changes emitted has landed
    assert prefect_places_holding(name) == []
    with get_client(sync_client=True) as client:
        kept = client.read_deployment(UUID(deployment))
    assert kept.parameters == {"data": "[purged]", "config": {"data": {"pii": ["email", "phone"]}}}
    assert kept.schedules[0].parameters == {"data": "[purged]"}
