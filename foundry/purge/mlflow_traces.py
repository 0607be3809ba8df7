"""What MLflow keeps of a purged document besides artifacts (`purge_artifacts`, `served`): a run's params (the
flattened config: `data.source`), its tags, its name (`evaluate-jane.txt`), its dataset inputs (name, source,
`mlflow.data.source` tag), and a registered version's or model's tags and description; found through the client
API, every run of every experiment, deleted ones included (a deleted run's rows stay until `mlflow gc`, which a
purge does not run: it changes them as it changes an active run's, so the rows `mlflow gc` would drop later hold
nothing of the document either).

- run tags and name (of an active run), version and model tags, descriptions: rewritten through the API ("[purged]");
- run params and dataset inputs, which MLflow never lets change, and a deleted run's tags and name: rewritten in
  the tracking store's SQLite file when Foundry owns it (`trace_stores.Store`), else left and listed in the purge
  record (a deleted run on another machine's server keeps them until its operator runs `mlflow gc`).

The purge records' own runs (experiment `foundry-purges`: the reason as given, labels) are not searched. Any
error reading is `TrackingUnreadable`: a purge that cannot see every run refuses, never finds "nothing".
"""

from __future__ import annotations

import json
from pathlib import Path

from foundry.core.model_uri import ModelUri
from foundry.gc.refs import registered_versions
from foundry.purge.artifacts import PURGED, scrubbed_value
from foundry.purge.plan import TraceHit
from foundry.purge.trace_stores import Store, TraceNeedles, count
from foundry.registry.versions import PURGE_EXPERIMENT

PAGE = 1000
DATASET_FIELDS = ("name", "dataset_source", "dataset_schema", "dataset_profile")


class TrackingUnreadable(RuntimeError):
    """MLflow's runs or registry could not be searched whole: the purge cannot say they are clean."""


def store(home: Path) -> Store:
    """The SQLite files that may be the tracking store: the tracking URI's, and the one `foundry up` serves."""
    from mlflow.tracking import get_tracking_uri

    uri = get_tracking_uri()
    return Store(
        [Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None, home / "mlflow" / "mlflow.db"]
    )


def scan(home: Path, client, needles: TraceNeedles) -> list[TraceHit]:
    try:
        return _runs(client, needles, store(home)) + _registry(client, needles)
    except Exception as exc:  # a server's error, a store that cannot be opened: never "nothing there"
        raise TrackingUnreadable(
            f"cannot search MLflow's runs and registry whole ({type(exc).__name__}: {exc}); purge refuses"
        ) from exc


def _experiments(client) -> list:
    from mlflow.entities import ViewType

    found, token = [], None
    while True:
        page = client.search_experiments(view_type=ViewType.ALL, max_results=PAGE, page_token=token)
        found += [e for e in page if e.name != PURGE_EXPERIMENT]
        token = page.token
        if not token:
            return found


def _all_runs(client, experiment_id: str) -> list:
    from mlflow.entities import ViewType

    found, token = [], None
    while True:
        page = client.search_runs([experiment_id], run_view_type=ViewType.ALL, max_results=PAGE, page_token=token)
        found += list(page)
        token = page.token
        if not token:
            return found


def _runs(client, needles: TraceNeedles, found: Store) -> list[TraceHit]:
    hits = []
    for experiment in _experiments(client):
        for run in _all_runs(client, experiment.experiment_id):
            hits += _run_hits(run, needles, found.holding("runs", "run_uuid", run.info.run_id) is not None)
    return hits


def _run_hits(run, needles: TraceNeedles, owned: bool) -> list[TraceHit]:
    """A run's params, tags and dataset inputs holding a needle: tags of an active run through the API, the
    rest (and a deleted run's tags) in the store's file when Foundry owns it (`owned`), else left."""
    active = run.info.lifecycle_stage == "active"
    found = {
        "run params": ([k for k, v in run.data.params.items() if needles.hit(v)], False),
        "run tags": ([k for k, v in run.data.tags.items() if needles.hit(v)], active),
        "run name": (["name"] if needles.in_run_name(run.info.run_name) else [], active),
        "dataset input": (
            [d.dataset.digest for d in (run.inputs.dataset_inputs if run.inputs else []) if _dataset_holds(d, needles)],
            False,
        ),
    }
    hits = []
    for kind, (keys, api) in found.items():
        if keys:
            how = "api" if api else "sqlite" if owned else ""
            action = "redact" if how else "left"
            hits.append(
                TraceHit(
                    store="mlflow", kind=kind, id=run.info.run_id, keys=tuple(sorted(keys)), action=action, how=how
                )
            )
    return hits


def _dataset_holds(dataset_input, needles: TraceNeedles) -> bool:
    dataset = dataset_input.dataset
    values = [dataset.name, dataset.source, dataset.schema, dataset.profile] + [t.value for t in dataset_input.tags]
    return any(needles.hit(v) for v in values if v)


def _registry(client, needles: TraceNeedles) -> list[TraceHit]:
    hits = []

    def hit(kind: str, ident: str, keys=()) -> None:
        hits.append(TraceHit(store="mlflow", kind=kind, id=ident, keys=tuple(sorted(keys)), action="redact", how="api"))

    for version in registered_versions(client):
        uri = str(ModelUri.of(version))
        if keys := [k for k, v in version.tags.items() if needles.hit(v)]:
            hit("version tags", uri, keys)
        if version.description and needles.hit(version.description):
            hit("version description", uri)
    token = None
    while True:
        page = client.search_registered_models(max_results=PAGE, page_token=token)
        for model in page:
            if keys := [k for k, v in (model.tags or {}).items() if needles.hit(v)]:
                hit("model tags", model.name, keys)
            if model.description and needles.hit(model.description):
                hit("model description", model.name)
        token = page.token
        if not token:
            return hits


def remove(home: Path, client, needles: TraceNeedles, hits: list[TraceHit], counts: dict[str, int]) -> Store:
    """Each hit rewritten as its `how` says; the `Store` whose `changed` files are to be vacuumed."""
    found = store(home)
    for hit in hits:
        count(counts, hit, _in_file(found, hit, needles) if hit.how == "sqlite" else _through_api(client, hit, needles))
    return found


def _through_api(client, hit: TraceHit, needles: TraceNeedles) -> int:
    marker = needles.marker
    if hit.kind == "run name":  # the run's name and its `mlflow.runName` tag, as MLflow keeps them equal
        client.update_run(hit.id, name=marker or PURGED)
    elif hit.kind == "run tags":
        for key in hit.keys:
            client.set_tag(hit.id, key, marker)
    elif hit.kind in ("version tags", "version description"):
        uri = ModelUri.parse(hit.id)
        if hit.kind == "version description":
            client.update_model_version(uri.name, uri.version, description=marker)
        for key in hit.keys:
            client.set_model_version_tag(uri.name, uri.version, key, marker)
    elif hit.kind == "model description":
        client.update_registered_model(hit.id, description=marker)
    else:  # model tags
        for key in hit.keys:
            client.set_registered_model_tag(hit.id, key, marker)
    return 1


def _in_file(found: Store, hit: TraceHit, needles: TraceNeedles) -> int:
    """A run's params or tags, or its dataset inputs, rewritten in the SQLite file that holds the run."""
    path = found.holding("runs", "run_uuid", hit.id)
    if path is None:
        return 0
    if hit.kind == "run name":
        marker = needles.marker or PURGED  # a run has a name: never empty
        return found.execute(
            path,
            [
                ("UPDATE runs SET name = ? WHERE run_uuid = ?", (marker, hit.id)),
                ("UPDATE tags SET value = ? WHERE run_uuid = ? AND key = 'mlflow.runName'", (marker, hit.id)),
            ],
        )
    if hit.kind in ("run params", "run tags"):
        table = "params" if hit.kind == "run params" else "tags"
        sql = f"UPDATE {table} SET value = ? WHERE run_uuid = ? AND key = ?"
        return found.execute(path, [(sql, (needles.marker, hit.id, key)) for key in hit.keys])
    return found.execute(path, _dataset_statements(path, hit, needles))


def _redacted(value: str, needles: TraceNeedles) -> str:
    """A dataset's source, schema or profile (JSON, as MLflow keeps them) with each string holding a needle
    replaced by the marker; the marker alone when it is no JSON."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return needles.marker
    new, changed = scrubbed_value(parsed, needles)
    return json.dumps(new) if changed and isinstance(parsed, dict | list) else needles.marker


def _dataset_statements(path: Path, hit: TraceHit, needles: TraceNeedles) -> list[tuple[str, tuple]]:
    """The run's dataset inputs of those digests: each field and input tag holding a needle rewritten. A name
    keeps the dataset's id after the marker: (experiment, name, digest) is unique."""
    import sqlite3

    connection = sqlite3.connect(path, timeout=60)
    try:
        rows = connection.execute(
            "SELECT d.dataset_uuid, i.input_uuid, d.name, d.dataset_source, d.dataset_schema, d.dataset_profile "
            "FROM inputs i JOIN datasets d ON d.dataset_uuid = i.source_id "
            "WHERE i.destination_id = ? AND i.source_type = 'DATASET' AND d.digest IN "
            f"({','.join('?' * len(hit.keys))})",
            (hit.id, *hit.keys),
        ).fetchall()
        tags = {
            row[0]: connection.execute("SELECT name, value FROM input_tags WHERE input_uuid = ?", (row[1],)).fetchall()
            for row in rows
        }
    finally:
        connection.close()
    statements = []
    for dataset, input_id, *values in rows:
        for field, value in zip(DATASET_FIELDS, values):
            if value and needles.hit(value):
                new = f"{needles.marker} {dataset[:8]}" if field == "name" else _redacted(value, needles)
                statements.append((f"UPDATE datasets SET {field} = ? WHERE dataset_uuid = ?", (new, dataset)))
        for name, value in tags[dataset]:
            if value and needles.hit(value):
                sql = "UPDATE input_tags SET value = ? WHERE input_uuid = ? AND name = ?"
                statements.append((sql, (needles.marker, input_id, name)))
    return statements
