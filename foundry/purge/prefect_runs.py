"""The Prefect artifacts of `foundry purge` (`purge_home`): read and rewritten through Prefect's client API, so
that a Prefect server works as the embedded store does. With `prefect_traces` (the runs' parameters, states, logs
and events), the only modules of the library that talk to Prefect: a purge must see the run pages' markdown
summaries and tables wherever they are kept.

Which store: the server `PREFECT_API_URL` names; without one, the database the temporary server would open
(`$PREFECT_HOME/prefect.db`), and when that file does not exist no run ever stored an artifact there, so no
server is started to say so. Any failure to read or rewrite is `PrefectUnreadable`, never "nothing there".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from foundry.purge import artifacts
from foundry.purge.artifacts import Needles


class PrefectUnreadable(RuntimeError):
    """The Prefect artifacts could not be read or rewritten: the purge cannot say they are clean."""


def _database() -> Path | None:
    """The SQLite file of the temporary server (no `PREFECT_API_URL`); None when a server is named, or its
    database is not SQLite."""
    from prefect.settings import get_current_settings

    return None if get_current_settings().api.url else server_database()


def no_store() -> bool:
    """Whether no server is named and the temporary server's database is not a file: no run ever stored anything
    there, and no server is started to say so."""
    database = _database()
    return database is not None and not database.is_file()


def server_database() -> Path | None:
    """The SQLite file the settings give a Prefect server (the temporary one's, or one this process's settings
    configure, as the test harness does); None when its database is not SQLite."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    url = settings.server.database.connection_url
    url = url.get_secret_value() if url is not None else f"sqlite+aiosqlite:///{settings.home / 'prefect.db'}"
    return Path(url.split(":///", 1)[1]) if url.startswith("sqlite") and ":///" in url else None


def embedded_database(home: Path) -> Path | None:
    """The embedded Prefect store to vacuum after a rewrite: the temporary server's, or the one `foundry up`
    serves from `$FOUNDRY_HOME/prefect/prefect.db`; None when neither is a file here."""
    for path in (_database(), home / "prefect" / "prefect.db"):
        if path is not None and path.is_file():
            return path
    return None


def _scrubbed_artifact(artifact, needles: Needles) -> tuple[dict, int]:
    """The fields of an artifact that change (its data and description, rewritten as a file's text would be),
    and how many strings or lines went. A table's data is a JSON string; a markdown one, text."""
    update, count = {}, 0
    for field in ("data", "description"):
        value = getattr(artifact, field)
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = None
            suffix = ".json" if isinstance(parsed, list | dict) else ".md"
            new, n = artifacts.scrubbed(value, suffix, needles)
        elif isinstance(value, list | dict):
            new, n = artifacts.scrubbed_value(value, needles)
        else:
            continue
        if n:
            update[field], count = new, count + n
    return update, count


def _artifacts(client) -> Iterator:
    from prefect.client.schemas.sorting import ArtifactSort

    offset, page = 0, 200
    while True:
        batch = client.read_artifacts(sort=ArtifactSort.ID_DESC, limit=page, offset=offset)
        yield from batch
        if len(batch) < page:
            return
        offset += page


def with_client(call):
    """`call(client)` with a Prefect client; any failure is `PrefectUnreadable`."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    try:
        with get_client(sync_client=True) as client:
            return call(client)
    except Exception as exc:  # httpx, the server's answer, an ephemeral server that did not start: all unread
        where = PREFECT_API_URL.value() or "the temporary Prefect server"
        raise PrefectUnreadable(f"cannot read the Prefect store at {where}: {exc}; purge refuses") from exc


def hits(needles: Needles) -> list[tuple[str, int]]:
    """(artifact id, strings or lines holding a needle) for each Prefect artifact that holds one."""
    if no_store():  # no store, so no artifact: nothing to start
        return []

    def read(client) -> list[tuple[str, int]]:
        return [
            (str(artifact.id), count)
            for artifact in _artifacts(client)
            if (count := _scrubbed_artifact(artifact, needles)[1])
        ]

    return with_client(read)


def rewrite(artifact_id: str, needles: Needles) -> int:
    """One artifact's data and description rewritten through the API (`update_artifact`); how many strings went."""
    from uuid import UUID

    from prefect.client.schemas.actions import ArtifactUpdate
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterId

    def rewrite(client) -> int:
        wanted = ArtifactFilter(id=ArtifactFilterId(any_=[UUID(artifact_id)]))
        count = 0
        for artifact in client.read_artifacts(artifact_filter=wanted):  # gone already: nothing to do
            update, count = _scrubbed_artifact(artifact, needles)
            if count:
                client.update_artifact(artifact.id, ArtifactUpdate(**update))
        return count

    return with_client(rewrite)
