"""What the searches of Prefect's and MLflow's own stores (`prefect_traces`, `mlflow_traces`, run by `traces`)
share: the strings to look for (`TraceNeedles`) and the SQLite file of a store Foundry owns (`Store`).

A value counts when it holds a document's text or sha256 or matches the regex as an artifact's string does
(`purge_artifacts.Needles`), when it holds the criterion as given (a `--match` regex as typed, a `--document`
sha256: a flow run's own parameters), or when it names a matched source (`named_in`): as every other place of a
purge counts a name (`purge_plan.names_in`: `reading jane.txt`; a bare word such as `email`, which a config list
(`data.pii`) or a log line holds without naming the file, only as the whole value), or as the last components of
a path (`data.source=/data/jane.txt`: a single-file source is named by its file name alone). A run's name counts
when it ends with the source's last name after a dash, as Foundry names a run on a source (`evaluate-jane.txt`);
a log line or an event then counts when it quotes that run's whole name.

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
import copy
import functools
import re
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path

from foundry.purge.artifacts import PURGED, Needles
from foundry.purge.plan import TraceHit, names_in


class TraceNeedles:
    """`Needles`, plus the criterion as given, and the names of matched sources where they stand whole (`names`)."""

    def __init__(self, needles: Needles):
        self.needles = needles
        self.unnamed = needles.unnamed()
        # a source is looked for as a whole name (`names`): `jane.txt` is no part of `mary_jane.txt`
        self.literal = needles.criterion.value if needles.criterion.kind != "source" else ""
        self.names = sorted(name for name in needles.names if name)
        self.run_names: frozenset[str] = frozenset()

    def quoting(self, run_names: set[str]) -> TraceNeedles:
        """These needles, and the names of the runs found naming a source (`in_run_name`), which a log line or an
        event quotes whole (`Beginning flow run 'evaluate-jane.txt'`)."""
        found = copy.copy(self)
        found.run_names = self.run_names | {name for name in run_names if name}
        return found

    def hit(self, value: str, whole: bool = True) -> bool:
        """Whether `value` holds a needle; `whole` False for a JSON key or list item (`purge_plan.names_in`)."""
        return (
            self.unnamed.hit(value)
            or (bool(self.literal) and self.literal in value)
            or any(named_in(value, name, whole) for name in self.names)
            or any(name in value for name in self.run_names)
        )

    def in_run_name(self, name: str | None) -> bool:
        """Whether a flow run's or an MLflow run's name holds a needle, or ends with a matched source's last name
        after a dash, as Foundry names a run on a source (`evaluate-jane.txt`: `evaluate.scores.run_label`)."""
        if not name:
            return False
        return self.hit(name) or any(name.endswith("-" + source.rsplit("/", 1)[-1]) for source in self.names)

    def in_value(self, value, whole: bool = True) -> bool:
        """Whether a JSON-like value (a string, or a dict or list of them) holds a needle, in a key or a string
        (a key or a list's string item as `purge_artifacts._leaves` counts one)."""
        if isinstance(value, str):
            return self.hit(value, whole)
        if isinstance(value, dict):
            return any(self.hit(str(k), whole=False) or self.in_value(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return any(self.in_value(v, whole=False) for v in value)
        return False

    def redacted(self, value: str | None) -> str | None:
        """`value` as a purge leaves it: PURGED when it holds a needle (a regex matching PURGED itself: empty)."""
        return value if value is None or not self.hit(value) else self.marker

    @property
    def marker(self) -> str:
        """What replaces a value: PURGED, or empty when a regex matches PURGED itself (a second search finds none)."""
        return "" if self.hit(PURGED) else PURGED


def named_in(value: str, name: str, whole: bool = True) -> bool:
    """Whether a store's `value` names the source `name` as every other place of a purge counts a name
    (`purge_plan.names_in`: a bare word only as the whole value), or as a path's last components."""
    return names_in(value, name, whole) or _path_tail(name).search(value) is not None


@functools.lru_cache(maxsize=4096)
def _path_tail(name: str) -> re.Pattern:
    """`name` as a path's last components (`/data/jane.txt`, `s3://b/k/jane.txt`), not inside a longer name
    (`jane.txt2`, `jane.txt.bak`, `jane.txt-old`) nor as a folder (`/data/email/x.txt` names another file); a full
    stop or a closing quote may follow it."""
    return re.compile(r"[/\\]" + re.escape(name) + r"(?![\w/\\-]|\.\w)")


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
