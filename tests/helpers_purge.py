"""Purge: Prefect artifacts scrubbed (for a slow test that runs under `prefect_harness`); what Prefect's and
MLflow's APIs still show of a name, and the runs that leave it there."""

from __future__ import annotations

from pathlib import Path


def prefect_artifacts_scrubbed(home: Path) -> None:
    """Under a Prefect API (`prefect_harness`): a markdown and a table artifact holding a canary are found by
    `purge_home.scan` and rewritten through the API by `scrub` (the line dropped, the cell "[purged]"), an
    artifact without it is left as it was, and a second scan finds nothing."""
    import json

    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.client.orchestration import get_client

    from foundry.purge import artifacts as purge_artifacts
    from foundry.purge import home as purge_home
    from foundry.purge.plan import Criterion

    canary = "quokka marmalade prefect"
    needles = purge_artifacts.Needles(Criterion(kind="match", value=canary), {}, set())
    ids = {
        "markdown": create_markdown_artifact(f"# summary\nkept\nthe {canary}\n", key="purge-md", _sync=True),
        "table": create_table_artifact([{"a": "x", "b": f"the {canary}"}], key="purge-table", _sync=True),
        "clean": create_markdown_artifact("# nothing here\n", key="purge-clean", _sync=True),
    }
    hits = purge_home.scan(home, needles)
    assert {h.where for h in hits} >= {str(ids["markdown"]), str(ids["table"])}
    assert str(ids["clean"]) not in {h.where for h in hits}
    assert purge_home.scrub(home, needles, hits)["prefect artifact"] == len(hits)
    with get_client(sync_client=True) as client:
        data = {str(a.id): a.data for a in client.read_artifacts()}
    assert data[str(ids["markdown"])] == "# summary\nkept\n"
    assert data[str(ids["table"])] == json.dumps([{"a": "x", "b": "[purged]"}])
    assert data[str(ids["clean"])] == "# nothing here\n"
    assert purge_home.scan(home, needles) == []


def mlflow_places_holding(client, needle: str) -> list[str]:
    """Every place MLflow's API shows that still holds `needle`: a run's params, tags and dataset inputs (deleted
    runs too, every experiment), a registered version's or model's tags and description."""
    from mlflow.entities import ViewType

    found = []
    for experiment in client.search_experiments(view_type=ViewType.ALL):
        for run in client.search_runs([experiment.experiment_id], run_view_type=ViewType.ALL):
            rid = run.info.run_id
            found += [f"run {rid} param {k}" for k, v in run.data.params.items() if needle in v]
            found += [f"run {rid} tag {k}" for k, v in run.data.tags.items() if needle in v]
            for given in run.inputs.dataset_inputs:
                d = given.dataset
                values = [d.name, d.source, d.schema or "", d.profile or ""] + [t.value for t in given.tags]
                found += [f"run {rid} dataset {d.digest}" for v in values if needle in v]
    for version in client.search_model_versions():
        where = f"models:/{version.name}/{version.version}"
        found += [f"{where} tag {k}" for k, v in version.tags.items() if needle in v]
        found += [f"{where} description"] if needle in (version.description or "") else []
    for model in client.search_registered_models():
        found += [f"model {model.name} tag {k}" for k, v in (model.tags or {}).items() if needle in v]
        found += [f"model {model.name} description"] if needle in (model.description or "") else []
    return found


def seed_mlflow_traces(client, experiment_id: str, path: str, model: str = "") -> dict[str, str]:
    """What a pipeline run on a single-file source leaves in MLflow, `path` being that file: a run with the
    config's `data.source` as a param, a tag and a dataset input naming it; a deleted run with the same param;
    and, for a registered `model` (NAME/VERSION), a version tag and description and a model description. Returns
    the two run ids by name."""
    from foundry.core.contracts import DataVersion
    from foundry.runtime import tracking

    runs = {}
    for name in ("kept", "deleted"):
        run = client.create_run(experiment_id, run_name=f"traces-{name}")
        runs[name] = run.info.run_id
        client.log_param(run.info.run_id, "data.source", path)
        client.log_param(run.info.run_id, "train.max_steps", "3")
        client.set_tag(run.info.run_id, "note", f"prepared from {path}")
        tracking.log_dataset(run.info.run_id, DataVersion(data_version="a" * 32, remote="/r"), prepared_from=path)
        client.set_terminated(run.info.run_id, "FINISHED")
    client.delete_run(runs["deleted"])
    if model:
        name, version = model.split("/")
        client.set_model_version_tag(name, version, "data.source", path)
        client.update_model_version(name, version, description=f"trained on {path}")
        client.update_registered_model(name, description=f"first trained on {path}")
    return runs


def _read_source(path: str) -> None:
    from prefect import get_run_logger

    get_run_logger().info("reading %s", path)
    raise ValueError(f"cannot read {path}")


def traces_flow(path: str) -> None:
    """A flow run on the single-file source `path` (its parameter), logging it, whose task fails naming it
    (the task run's state message, and the state-change event that repeats it); the flow itself completes."""
    from prefect import flow, task

    @flow(name="traces")
    def reads(source: str) -> None:
        try:
            task(_read_source, name="read-source", retries=0)(source)
        except ValueError:
            pass

    reads(path)


def named_flow_run(path: str) -> None:
    """A flow run named after the single-file source `path` as `flows/evaluate.py` names one
    (`evaluate-<file name>`), whose parameters do not name it: its name, and the engine's log lines and events
    that quote the name, are all that hold it."""
    from prefect import flow

    @flow(name="named", flow_run_name=f"evaluate-{path.rsplit('/', 1)[-1]}")
    def named(data: str) -> None:
        pass

    named("0123abcd")


def deployment_naming(path: str) -> str:
    """A deployment whose parameters and whose schedule's name the single-file source `path` (a nightly
    evaluation, as `foundry up` serves one), beside a config list that only shares words with a name; its id."""
    from datetime import timedelta

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.schedules import IntervalSchedule

    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("evaluate")
        schedule = DeploymentScheduleCreate(
            schedule=IntervalSchedule(interval=timedelta(days=1)), active=False, parameters={"data": path}
        )
        parameters = {"data": path, "config": {"data": {"pii": ["email", "phone"]}}}
        return str(client.create_deployment(flow_id, "nightly-eval", parameters=parameters, schedules=[schedule]))


def _every(read) -> list:
    """Every record a paged Prefect read returns (`read(offset)`, 200 a page: the server's default limit would
    hide the newest records of a session's shared server behind the first page)."""
    records, offset = [], 0
    while batch := read(offset):
        records += batch
        offset += len(batch)
    return records


def prefect_places_holding(needle: str, wait: bool = False) -> list[str]:
    """Every record Prefect's API shows that holds `needle`, as "<kind> <id>" (kind: flow-run-parameters,
    flow-run-name, flow-run-state, task-run-state, log, event, deployment-parameters, schedule-parameters). With
    `wait`, until a log and an event hold it too and two searches six seconds apart agree (logs and events are
    sent and stored in the background: a purge searching before the last of them lands would miss it), for up
    to a minute."""
    import json
    import time
    from datetime import UTC, datetime

    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventOccurredFilter

    deadline, before = time.time() + 60, None
    while True:
        found = []
        with get_client(sync_client=True) as client:
            for run in _every(lambda offset: client.read_flow_runs(limit=200, offset=offset)):
                found += [f"flow-run-parameters {run.id}"] if needle in json.dumps(run.parameters) else []
                found += [f"flow-run-name {run.id}"] if needle in run.name else []
                found += [
                    f"flow-run-state {s.id}" for s in client.read_flow_run_states(run.id) if needle in (s.message or "")
                ]
            for task in _every(lambda offset: client.read_task_runs(limit=200, offset=offset)):
                found += [
                    f"task-run-state {s.id}"
                    for s in client.read_task_run_states(task.id)
                    if needle in (s.message or "")
                ]
            for deployment in _every(lambda offset: client.read_deployments(limit=200, offset=offset)):
                found += (
                    [f"deployment-parameters {deployment.id}"] if needle in json.dumps(deployment.parameters) else []
                )
                found += [
                    f"schedule-parameters {s.id}" for s in deployment.schedules if needle in json.dumps(s.parameters)
                ]
            logs = _every(lambda offset: client.read_logs(limit=200, offset=offset))
            found += [f"log {line.id}" for line in logs if needle in line.message]
            since = EventFilter(occurred=EventOccurredFilter(since=datetime(2000, 1, 1, tzinfo=UTC)))
            page = client.read_events(filter=since, limit=50)
            events = list(page.events)
            while page.next_page:
                page = client.read_events_page(page.next_page)
                events += page.events
            found += [f"event {e.id}" for e in events if needle in e.model_dump_json()]
        kinds = {place.split(" ")[0] for place in found}
        if not wait or ({"log", "event"} <= kinds and sorted(found) == before) or time.time() > deadline:
            return found
        before = sorted(found)
        time.sleep(6)  # longer than the server's event persister waits to flush (5 s)
