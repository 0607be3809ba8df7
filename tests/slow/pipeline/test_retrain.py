"""Model maintenance through the real flows, under a real Prefect server: `foundry retrain` on changed sources
(http, S3) through the CLI, a retrain with nothing new, and the events with the example automation.

Champions here are copies of the session's `it-gpt` version (`conftest.champion_copy`) under names of their
own, so `it-gpt` stays as the other tests expect it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO_ROOT, champion_copy, failing_mlflow_server, prefect_events, run_page
from helpers_configs import NO_BASELINES
from synthetic import synthetic_docs

from foundry.config import load_config
from foundry.runtime import tracking


def tiny(name: str, *overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", [f"registry.model_name={name}", *NO_BASELINES, *overrides])


def splits(data_dir: Path) -> dict[str, str]:
    table = pd.read_csv(data_dir / "documents.csv", dtype=str)
    return dict(zip(table["sha256"], table["split"]))


def test_a_registry_error_in_the_champion_lookup_stops_the_run(prefect_harness, monkeypatch):
    """The fault: any error of the champion look-up read as "no champion yet", so the gate passed. Now the
    run stops there, before anything is trained or registered, and its MLflow run is marked FAILED."""
    from mlflow.exceptions import MlflowException

    from flows.train_pipeline import train_pipeline

    with failing_mlflow_server(monkeypatch, "MLFLOW_REGISTRY_URI"), pytest.raises(MlflowException, match="503"):
        train_pipeline(config=tiny("rt-blind"))  # the tracking store stays; the registry answers 503
    client = tracking.client()
    experiment = client.get_experiment_by_name("foundry").experiment_id
    runs = client.search_runs([experiment], "params.`registry.model_name` = 'rt-blind'")
    assert [r.info.status for r in runs] == ["FAILED"]
    assert "train/loss" not in runs[0].data.metrics
    assert client.search_model_versions("name='rt-blind'") == []


def test_a_retrain_with_nothing_new_is_recorded_and_announced(base_model, prefect_harness):
    from flows.retrain import retrain
    from foundry.core.contracts import SkippedRun
    from foundry.reports.summaries import skipped_summary

    champion = f"models:/rt-skip/{champion_copy(base_model[1], 'rt-skip')}"
    result = retrain(config=tiny("rt-skip"))
    assert isinstance(result, SkippedRun) and result.parent == champion
    assert tracking.client().get_run(result.run_id).data.tags["retrain.skipped"] == "true"
    (event,) = prefect_events(champion)
    assert event.event == "foundry.retrain.nothing-new" and event.resource["foundry.model.name"] == "rt-skip"
    flow_run, artifacts = run_page(result.run_id)  # the run page says why nothing was trained, links the run
    assert flow_run.name == "retrain-rt-skip"  # no data version was made to add to it
    assert skipped_summary(result) in artifacts["pipeline-summary"].data and "nothing new" in result.reason
    assert f"/runs/{result.run_id}" in artifacts["mlflow-run"].data and "model-version" not in artifacts


def test_foundry_retrain_sees_changed_sources_and_keeps_the_splits(
    base_model, prefect_harness, http_folder, s3_env, foundry_home, tmp_path
):
    """The CLI, as the weekly job runs it: a file changed at the same URL and an object deleted from the bucket
    since the last acquire are seen; the new data version keeps every split of the champion's; the retrain
    succeeds, exits 0 and prints its summary (it used to fail with KeyError 'model_name' after registering)."""
    from prefect.settings import PREFECT_API_URL

    from foundry.data.acquire import acquire_source

    _, base = base_model
    champion_copy(base, "rt-cli")
    folder, url = http_folder
    docs = synthetic_docs(6, seed=11)
    page = folder / "fresh.txt"
    page.write_text(docs[0])
    os.utime(page, (time.time() - 3600, time.time() - 3600))
    s3_env.create_bucket(Bucket="rt-bucket")
    for key, text in zip(("a", "b", "c"), docs[1:4]):
        s3_env.put_object(Bucket="rt-bucket", Key=f"new/{key}.txt", Body=text.encode())
    overrides = [
        "registry.model_name=rt-cli",
        f"data.sources=[{url}/fresh.txt, s3://rt-bucket/new]",
        "retrain.train.max_steps=10",
        "data.fetch_backoff_s=0.1",
        "evaluation.min_improvement=100",  # the gate must refuse: one outcome, whatever ten steps learn
        *NO_BASELINES,
    ]
    config = load_config(REPO_ROOT / "configs" / "tiny.yaml", overrides)
    acquire_source(config.data, tmp_path / "earlier.json")  # what an earlier acquire left in the local copies
    page.write_text(docs[4])  # changed at the same URL
    s3_env.delete_object(Bucket="rt-bucket", Key="new/c.txt")  # deleted at the source

    command = [sys.executable, "-m", "foundry.cli", "retrain", "--config", str(REPO_ROOT / "configs" / "tiny.yaml")]
    for override in overrides:
        command += ["--set", override]
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}  # events land in this test's server
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Foundry pipeline finished" in done.stdout and "models:/rt-cli/2" in done.stdout
    assert "parent     models:/rt-cli/1" in done.stdout

    client = tracking.client()
    version = client.get_model_version("rt-cli", "2")
    tags = version.tags
    run = client.get_run(version.run_id)
    manifest = json.loads(Path(client.download_artifacts(run.info.run_id, "data/source_manifest.json")).read_text())
    seen = {entry["name"]: entry for entry in manifest["entries"] if not entry["name"].startswith("0/")}
    assert sorted(seen) == ["1/fresh.txt", "2/a.txt", "2/b.txt"]
    assert Path(seen["1/fresh.txt"]["path"]).read_text() == docs[4] and seen["1/fresh.txt"]["last_modified"]
    assert seen["2/a.txt"]["etag"] and seen["2/a.txt"]["origin"] == "s3://rt-bucket/new/a.txt"
    assert run.data.metrics["retrain/new_files"] == 3 and run.data.metrics["data/new_docs"] == 3
    from foundry.registry.lineage import format_lineage, lineage

    chain = lineage("models:/rt-cli/2", depth=1)
    assert {f.origin for f in chain[0].remote_files} == {
        f"{url}/fresh.txt",
        *(f"s3://rt-bucket/new/{k}.txt" for k in "ab"),
    }
    assert f"fetched  {url}/fresh.txt" in format_lineage(chain)
    assert 0 < run.data.metrics["data/replayed_docs"] < run.data.metrics["data/ledger_docs_present"]

    assert tags["parent_model"] == "models:/rt-cli/1" and tags["foundry.publication"] == "complete"
    assert tags["gate.old_holdout_version"] == base.data_version and tags["gate.champion_old_bits_per_byte"]
    assert "Forgetting guard" in version.description
    old, new = (
        splits(foundry_home / "hydrated" / base.data_version),
        splits(foundry_home / "hydrated" / tags["data_version"]),
    )
    assert not [sha for sha, split in new.items() if split == "holdout" and old.get(sha) == "train"]
    assert (foundry_home / "hydrated" / base.data_version / "ledger.csv").is_file()  # it travelled with the data
    assert all(new.get(sha, split) == split for sha, split in old.items() if split == "holdout")

    assert tags["gate.passed"] == tags["gate.promoted"] == "false" and "does not beat" in tags["gate.verdict"]
    (event,) = prefect_events("models:/rt-cli/2")
    assert event.event == "foundry.model.refused"
    assert str(client.get_model_version_by_alias("rt-cli", "champion").version) == "1"


def test_a_promotion_is_an_event_and_the_example_automation_acts_on_it(base_model, prefect_harness):
    """`foundry.model.promoted` lands in the server's event feed; the example automation reacts by running the
    reproduce deployment for the promoted model (the flow run is created; no worker runs it here)."""
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    from flows.automations import REPRODUCE_NEW_CHAMPIONS, create_automations
    from flows.deployments import build_deployments
    from flows.train_pipeline import train_pipeline

    reproduce = next(d for d in build_deployments(tiny("evt-gpt")) if d.name == "reproduce")
    deployment_id = reproduce.apply()
    create_automations()
    try:
        result = train_pipeline(config=tiny("evt-gpt", "train.max_steps=10"))
        assert result.promoted and result.model_uri == "models:/evt-gpt/1"
        (event,) = prefect_events("models:/evt-gpt/1")
        assert event.event == "foundry.model.promoted" and event.payload["verdict"] == "no champion yet"
        assert (f"mlflow.run.{result.run_id}", "mlflow-run") in [(r.id, r.role) for r in event.related]
        deadline, runs = time.time() + 90, []
        while not runs and time.time() < deadline:
            with get_client(sync_client=True) as client:
                runs = client.read_flow_runs(
                    deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
                )
            time.sleep(2)
        assert [r.parameters for r in runs] == [{"model_uri": "models:/evt-gpt/1"}]
    finally:
        Automation.read(name=REPRODUCE_NEW_CHAMPIONS).delete()
