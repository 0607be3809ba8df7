"""What the searches of Prefect's and MLflow's own stores (`prefect_traces`, `mlflow_traces`, run by `traces`)
share: the strings to look for (`TraceNeedles`) and the SQLite file of a store Foundry owns (`Store`).

A value counts when it holds a needle as an artifact's string does (`purge_artifacts.Needles`), when it holds
the criterion as given (a `--match` regex as typed, a `--source` path, a `--document` sha256: a flow run's own
parameters), or when it names a matched source file as the tail of a path (`data.source=/data/jane.txt` names
`jane.txt`: a single-file source is named by its file name alone).

What neither API can change (MLflow's run params and dataset inputs are immutable, a Prefect state's message
and its logs and events have no update or delete route) is changed in the store's SQLite file when Foundry owns
it: a file this machine holds (the embedded store, `$FOUNDRY_HOME/prefect/prefect.db` or
`$FOUNDRY_HOME/mlflow/mlflow.db` that `foundry up` serves, the temporary server's database) that holds the very
row the API returned (by its id: a UUID no other store has). That is safe because those rows are history, which
neither server writes again once a run has moved on: a past state, a log line, an event, a finished run's
params; the file is then vacuumed (`purge_home.vacuum`) so that no freed page keeps the old bytes. Elsewhere
(another machine's server, a PostgreSQL store) the record is left and listed in the purge record, by id.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path

from foundry.purge.artifacts import PURGED, Needles
from foundry.purge.plan import TraceHit


class TraceNeedles:
    """`Needles`, plus the criterion as given and the matched sources' names at the end of a path."""

    def __init__(self, needles: Needles):
        self.needles = needles
        # a source is looked for as a whole name (`paths`): `jane.txt` is no part of `mary_jane.txt`
        self.literal = needles.criterion.value if needles.criterion.kind != "source" else ""
        self.paths = [_tail_pattern(name) for name in needles.names if name]

    def hit(self, value: str) -> bool:
        return (
            self.needles.hit(value)
            or (bool(self.literal) and self.literal in value)
            or any(p.search(value) for p in self.paths)
        )

    def in_value(self, value) -> bool:
        """Whether a JSON-like value (a string, or a dict or list of them) holds a needle, in a key or a string."""
        if isinstance(value, str):
            return self.hit(value)
        if isinstance(value, dict):
            return any(self.in_value(k) or self.in_value(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return any(self.in_value(v) for v in value)
        return False

    def redacted(self, value: str | None) -> str | None:
        """`value` as a purge leaves it: PURGED when it holds a needle (a regex matching PURGED itself: empty)."""
        return value if value is None or not self.hit(value) else self.marker

    @property
    def marker(self) -> str:
        """What replaces a value: PURGED, or empty when a regex matches PURGED itself (a second search finds none)."""
        return "" if self.hit(PURGED) else PURGED


@functools.lru_cache(maxsize=4096)
def _tail_pattern(name: str) -> re.Pattern:
    """`name` as a whole name or a path's last components (`/data/jane.txt`), not inside another name."""
    return re.compile(r"(?<![\w.-])" + re.escape(name) + r"(?!\w)")


class Store:
    """The SQLite files that may be a store Foundry owns; a row is changed only in a file that holds it."""

    def __init__(self, candidates: Iterable[Path | None]):
        self.files = list(dict.fromkeys(p for p in candidates if p is not None and p.is_file()))
        self.changed: set[Path] = set()

    def holding(self, table: str, column: str, key: str) -> Path | None:
        """The first file whose `table` has a row with `column` = `key`; None when none does (or none is SQLite)."""
        for path in self.files:
            try:
                with _connected(path) as db:
                    if db.execute(f"SELECT 1 FROM {table} WHERE {column} = ? LIMIT 1", (key,)).fetchone():
                        return path
            except sqlite3.DatabaseError as exc:
                if "locked" in str(exc) or "busy" in str(exc):  # the store is there, and busy: never "not ours"
                    raise
                continue  # no such table, or no database: not the store the API answered from
        return None

    def execute(self, path: Path, statements: list[tuple[str, tuple]]) -> int:
        """The statements run in one transaction in `path`; how many rows they changed."""
        with _connected(path) as db:
            changed = sum(db.execute(sql, args).rowcount for sql, args in statements)
        if changed:
            self.changed.add(path)
        return changed


@contextlib.contextmanager
def _connected(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection in one transaction (committed when the block ends without an error), then closed."""
    connection = sqlite3.connect(path, timeout=60)
    try:
        with connection:
            yield connection
    finally:
        connection.close()


def count(counts: dict[str, int], hit: TraceHit, changed: int) -> None:
    key = f"{hit.store} {hit.kind}"
    counts[key] = counts.get(key, 0) + bool(changed)
