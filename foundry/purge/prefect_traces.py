"""What Prefect keeps of a purged document besides artifacts (`prefect_runs`): flow-run parameters (a flow's
config names its `data.source`, the purge flow its criterion) and names (`evaluate-jane.txt`), a deployment's
parameters and its schedules' (a scheduled run's config), state messages (an exception naming a file), log lines
and events (a state-change event repeats the state's message), found through Prefect's client API.

- flow-run parameters and names, deployment and schedule parameters: rewritten through the API
  (`update_flow_run`, `update_deployment`, `update_deployment_schedule`), each string holding a needle "[purged]";
- a flow or task run state's message: no route changes a state, so it is rewritten in the store's SQLite file
  when Foundry owns it (`trace_stores.Store`), else left and listed;
- a log line and an event: no route deletes them, so their rows are deleted in that file, else left and listed;
  so is the event a deployment's update emits, which quotes its parameters as they were (`_echoes`).

A store that cannot be read is `PrefectUnreadable` (fail closed); no store at all (the temporary server's
database not a file) is "nothing there", as for the artifacts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

from foundry.purge import prefect_runs
from foundry.purge.artifacts import PURGED, scrubbed_value
from foundry.purge.plan import TraceHit
from foundry.purge.trace_stores import Store, TraceNeedles, count

PAGE = 200  # the server's largest page
EVENT_PAGE = 50  # the events route's largest
ECHO_WAIT_S = 30  # how long `remove` waits for the events its own changes emit to be stored
# kind -> (table, id column): the rows changed in Foundry's own store
TABLES = {
    "flow run state": ("flow_run_state", "id"),
    "task run state": ("task_run_state", "id"),
    "log": ("log", "id"),
    "event": ("events", "id"),
}
REDACTED = {"flow run state", "task run state"}  # rewritten; the others (`TABLES`) deleted


def store(home: Path) -> Store:
    """The SQLite files that may be the store the API answers from: the server's configured database (the
    temporary server's, the test harness's) and the one `foundry up` serves."""
    return Store([prefect_runs.server_database(), home / "prefect" / "prefect.db"])


def _pages(read: Callable[[int], list]) -> Iterator:
    offset = 0
    while True:
        batch = read(offset)
        yield from batch
        if len(batch) < PAGE:
            return
        offset += PAGE


def _events(client) -> Iterator:
    from prefect.events.filters import EventFilter, EventOccurredFilter

    since = datetime(2000, 1, 1, tzinfo=UTC)  # the filter's default window is the last day only
    page = client.read_events(filter=EventFilter(occurred=EventOccurredFilter(since=since)), limit=EVENT_PAGE)
    while True:
        yield from page.events
        if not page.next_page:
            return
        page = client.read_events_page(page.next_page)


def _held(kind: str, ident, found: Store) -> TraceHit:
    """A hit the API cannot change: changed in the file that holds its row, or left."""
    table, column = TABLES[kind]
    owned = found.holding(table, column, str(ident)) is not None
    action = ("redact" if kind in REDACTED else "delete") if owned else "left"
    return TraceHit(store="prefect", kind=kind, id=str(ident), action=action, how="sqlite" if owned else "")


def _read(client, needles: TraceNeedles, found: Store) -> list[TraceHit]:
    from prefect.client.schemas.sorting import DeploymentSort, FlowRunSort, LogSort, TaskRunSort

    hits, named = [], set()
    for run in _pages(lambda o: client.read_flow_runs(sort=FlowRunSort.ID_DESC, limit=PAGE, offset=o)):
        if keys := tuple(sorted(k for k, v in (run.parameters or {}).items() if needles.in_value(v))):
            hits.append(
                TraceHit(
                    store="prefect", kind="flow run parameters", id=str(run.id), keys=keys, action="redact", how="api"
                )
            )
        hits += [_held("flow run state", s.id, found) for s in client.read_flow_run_states(run.id) if _says(s, needles)]
        if needles.in_run_name(run.name):
            hits.append(TraceHit(store="prefect", kind="flow run name", id=str(run.id), action="redact", how="api"))
            named.add(run.name)
    needles = needles.quoting(named)  # the logs and events of a run so named quote its name
    for deployment in _pages(lambda o: client.read_deployments(sort=DeploymentSort.CREATED_DESC, limit=PAGE, offset=o)):
        hits += _deployment_hits(deployment, needles)
    for task in _pages(lambda o: client.read_task_runs(sort=TaskRunSort.ID_DESC, limit=PAGE, offset=o)):
        hits += [
            _held("task run state", s.id, found) for s in client.read_task_run_states(task.id) if _says(s, needles)
        ]
    for line in _pages(lambda o: client.read_logs(sort=LogSort.TIMESTAMP_ASC, limit=PAGE, offset=o)):
        if needles.hit(line.message):
            hits.append(_held("log", line.id, found))
    for event in _events(client):
        if needles.in_value(event.model_dump(mode="json", exclude={"id"})):
            hits.append(_held("event", event.id, found))
    return hits


def _deployment_hits(deployment, needles: TraceNeedles) -> list[TraceHit]:
    """A deployment's parameters, and each of its schedules' (id `DEPLOYMENT/SCHEDULE`), holding a needle."""
    hits = []
    for ident, parameters in [(str(deployment.id), deployment.parameters)] + [
        (f"{deployment.id}/{s.id}", s.parameters) for s in deployment.schedules or []
    ]:
        if keys := tuple(sorted(k for k, v in (parameters or {}).items() if needles.in_value(v))):
            kind = "deployment parameters" if "/" not in ident else "deployment schedule parameters"
            hits.append(TraceHit(store="prefect", kind=kind, id=ident, keys=keys, action="redact", how="api"))
    return hits


def _says(state, needles: TraceNeedles) -> bool:
    return bool(state.message) and needles.hit(state.message)


def scan(home: Path, needles: TraceNeedles) -> list[TraceHit]:
    """Every flow run, state, log line and event holding a needle; `PrefectUnreadable` when Prefect cannot be read."""
    if prefect_runs.no_store():
        return []
    found = store(home)
    return prefect_runs.with_client(lambda client: _read(client, needles, found))


def remove(home: Path, needles: TraceNeedles, hits: list[TraceHit], counts: dict[str, int]) -> Store:
    """Each hit changed as its action says; the `Store` whose `changed` files are to be vacuumed. A deployment's
    parameters changed through the API leave an event that quotes them as they were (`_echoes`): deleted too."""
    found = store(home)
    api = [h for h in hits if h.how == "api"]
    if api:
        since = datetime.now(UTC) - timedelta(minutes=1)  # the server's clock may differ a little from ours
        prefect_runs.with_client(lambda client: [count(counts, h, _through_api(client, h, needles)) for h in api])
        if updated := {h.id for h in api if h.kind == "deployment parameters"}:
            echoes = prefect_runs.with_client(lambda client: _echoes(client, updated, since, needles))
            hits = hits + [e for e in (_held("event", i, found) for i in echoes) if e.how == "sqlite"]
    for hit in (h for h in hits if h.how == "sqlite"):
        count(counts, hit, _in_file(found, hit, needles))
    return found


def _echoes(client, deployments: set[str], since: datetime, needles: TraceNeedles) -> list[str]:
    """The ids of the `prefect.deployment.updated` events the purge's own updates of `deployments` emitted,
    which quote the parameters as they were ("from"). The server stores events in batches (every 5 s by
    default), so they are waited for, up to `ECHO_WAIT_S`: the purge's second search would otherwise run
    before they land and call the store clean. Those of a store Foundry does not own stay, and that search
    lists them as left."""
    from prefect.events.filters import EventFilter, EventNameFilter, EventOccurredFilter, EventResourceFilter

    wanted = EventFilter(
        occurred=EventOccurredFilter(since=since),
        event=EventNameFilter(name=["prefect.deployment.updated"]),
        resource=EventResourceFilter(id=[f"prefect.deployment.{d}" for d in sorted(deployments)]),
    )
    deadline = time.monotonic() + ECHO_WAIT_S
    while True:
        events = client.read_events(filter=wanted, limit=EVENT_PAGE).events
        landed = {e.resource.id.removeprefix("prefect.deployment.") for e in events}
        if deployments <= landed or time.monotonic() > deadline:
            return [str(e.id) for e in events if needles.in_value(e.model_dump(mode="json", exclude={"id"}))]
        time.sleep(1)


def _through_api(client, hit: TraceHit, needles: TraceNeedles) -> int:
    """A flow run's parameters or name, or a deployment's or schedule's parameters, rewritten through the API:
    each string holding a needle "[purged]". 0 when the record is gone since (nothing holds it)."""
    from prefect.exceptions import ObjectNotFound

    try:
        if hit.kind.startswith("deployment"):
            return _deployment(client, hit, needles)
        run = client.read_flow_run(UUID(hit.id))
    except ObjectNotFound:
        return 0
    if hit.kind == "flow run name":
        if not needles.in_run_name(run.name):
            return 0
        client.update_flow_run(run.id, name=needles.marker or PURGED)  # a run has a name: never empty
        return 1
    parameters, changed = scrubbed_value(run.parameters or {}, needles)
    if changed:
        client.update_flow_run(run.id, parameters=parameters)
    return changed


def _deployment(client, hit: TraceHit, needles: TraceNeedles) -> int:
    from prefect.client.schemas.actions import DeploymentUpdate

    deployment_id, _, schedule_id = hit.id.partition("/")
    deployment = client.read_deployment(UUID(deployment_id))
    if not schedule_id:
        parameters, changed = scrubbed_value(deployment.parameters or {}, needles)
        if changed:
            client.update_deployment(deployment.id, DeploymentUpdate(parameters=parameters))
        return changed
    for schedule in (s for s in deployment.schedules or [] if str(s.id) == schedule_id):
        parameters, changed = scrubbed_value(schedule.parameters or {}, needles)
        if changed:
            client.update_deployment_schedule(deployment.id, schedule.id, parameters=parameters)
        return changed
    return 0


def _in_file(found: Store, hit: TraceHit, needles: TraceNeedles) -> int:
    """A state's message rewritten, or a log line or event deleted (with the event's resources), in the file
    that holds its row; 0 when none does any more."""
    table, column = TABLES[hit.kind]
    path = found.holding(table, column, hit.id)
    if path is None:
        return 0
    if hit.kind in REDACTED:
        return found.execute(path, [(f"UPDATE {table} SET message = ? WHERE {column} = ?", (needles.marker, hit.id))])
    statements = [(f"DELETE FROM {table} WHERE {column} = ?", (hit.id,))]
    if hit.kind == "event":
        statements.insert(0, ("DELETE FROM event_resources WHERE event_id = ?", (hit.id,)))
    return found.execute(path, statements)
