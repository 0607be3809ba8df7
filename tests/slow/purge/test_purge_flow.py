"""`foundry purge` as a Prefect flow under a real Prefect server: the summary it returns is its run page's
artifact, and the run pages' own artifacts are searched and rewritten through the Prefect API."""

from __future__ import annotations

from conftest import tracking_uri
from helpers_purge import prefect_artifacts_scrubbed


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
