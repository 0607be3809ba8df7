"""The validation gate inside Prefect tasks: prepare logs the audit, a failed validate the GX data docs.
The gate itself: tests/fast/pretrain/test_validate.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic import overrides, prepare_synthetic

from foundry.config import load_config
from foundry.data.acquire import acquire_source
from foundry.data.validate import ValidationFailed


def test_pipeline_tasks_log_the_audit_and_the_failed_gate_docs(prefect_harness, tmp_path_factory, tmp_path):
    """The Prefect tasks: prepare logs the audit (JSON and summary), a failed validate the GX data docs."""
    from mlflow import MlflowClient
    from prefect import flow

    from foundry.core.contracts import RunContext
    from foundry.runtime import tracking
    from tasks import data as data_tasks

    config, _, _ = prepare_synthetic(tmp_path_factory.mktemp("synthetic"))
    strict = load_config(None, overrides(Path(config.data.source), "model.block_size=100000"))  # holdout too short
    run_id = tracking.start_pipeline_run(strict)
    run = RunContext(run_id=run_id, dir=tmp_path / "run", home=tmp_path)
    run.dir.mkdir()
    manifest = acquire_source(strict.data, tmp_path / "source_manifest.json")

    @flow
    def stage_a():
        data_tasks.validate(strict, data_tasks.prepare(data_tasks.DatasetJob(strict, manifest, run)), run)

    with pytest.raises(ValidationFailed):
        stage_a()
    client = MlflowClient()
    logged = {a.path for top in ("data", "validation", "validation_docs") for a in client.list_artifacts(run_id, top)}
    assert {
        "data/audit.json",
        "data/audit.md",
        "validation/validation_report.json",
        "validation_docs/index.html",
    } <= logged
    audit = json.loads(open(client.download_artifacts(run_id, "data/audit.json")).read())
    assert audit["docs_in"] == 40 and audit["docs_out"] == 40
