"""The split ledgers Foundry keeps under `$FOUNDRY_HOME/ledgers/` rather than in a data version, those the workloads
name (`Workload.home_ledgers`): the alignment ledger (`foundry.align.split_ledger`: one `ledger.csv` per generation,
rows `sha256,split,name`, the name
`<data version>:<file>:<line>` where a prompt was first assigned). A row's name names the source file a record
was read from, which may be a person's name.

`hits` counts the rows whose name names a matched document or the purged source, as a whole name
(`purge_plan.names_in`, the one rule everywhere); the regex is never applied to a name (a ledger holds no
text). `rewrite` replaces such a row's name by `<data version>:[purged]`, row for row: the identity (a hash of
the prompt's user turns, not text) and the split stay, so that a record asking the same thing from another file
keeps its sticky split (dropping the row would let it move) and the signatures (one row each) still line up.
The generation keeps its folder name: `split_ledger.digest` only keys the align data task's cache, whose key
changes with the purged records anyway. Rewritten under the alignment lock, so a preparation running meanwhile
extends the rewritten ledger, never the old one (the lock is the one the workload names with its ledger).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from foundry.core import workload
from foundry.purge.artifacts import PURGED, Needles, regular_files
from foundry.purge.plan import names_in

ROOT = "ledgers"
LEDGER = "ledger.csv"  # foundry.data.ledger.LEDGER
PLACE = "split ledger"  # its `HomeHit.place`
VERSION = re.compile(r"[0-9a-f]{32}")


def files(home: Path) -> Iterator[Path]:
    """Every ledger under `$FOUNDRY_HOME/ledgers/`, never through a symbolic link."""
    yield from (p for p in regular_files(home / ROOT) if p.name == LEDGER)


def _named(name: str, needles: Needles) -> bool:
    return any(names_in(name, wanted) for wanted in needles.names)


def _rows(raw: bytes) -> list[list[str]] | None:
    """The ledger's rows, when it is one written as `Ledger.write` writes it (else None: left alone)."""
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8", errors="surrogateescape"), newline="")))
    return rows if rows and "name" in rows[0] and _csv(rows) == raw else None


def _csv(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode("utf-8", errors="surrogateescape")


def count(path: Path, needles: Needles) -> int:
    """How many of a ledger's rows name a matched document or source."""
    rows = _rows(path.read_bytes())
    if rows is None:
        return 0
    at = rows[0].index("name")
    return sum(1 for row in rows[1:] if len(row) > at and _named(row[at], needles))


def _renamed(name: str) -> str:
    version = name.split(":", 1)[0]
    return f"{version}:{PURGED}" if VERSION.fullmatch(version) else PURGED


def _lock(home: Path, path: Path) -> AbstractContextManager:
    """The lock of the workload's ledger that `path` is a file of; none for a ledger no workload names."""
    for name in workload.REGISTERED:
        for ledger in workload.named(name).home_ledgers(home):
            if path.is_relative_to(ledger.folder.resolve()):
                return ledger.locked()
    return nullcontext()


def rewrite(home: Path, relative: str, needles: Needles) -> int:
    """One ledger (`relative` to the home) with each row naming a matched document or source renamed, under
    the lock its workload names (the alignment lock for the alignment ledger); how many rows were. A ledger naming
    none is left untouched."""
    from foundry.core.fs import confined

    path = confined(home / relative, home / ROOT)
    with _lock(home, path):
        if not path.is_file():
            return 0
        raw = path.read_bytes()
        rows = _rows(raw)
        if rows is None:
            return 0
        at = rows[0].index("name")
        hit = [row for row in rows[1:] if len(row) > at and _named(row[at], needles)]
        for row in hit:
            row[at] = _renamed(row[at])
        if hit:
            scratch = path.with_name(f".{path.name}.purging")
            scratch.write_bytes(_csv(rows))
            os.chmod(scratch, path.stat().st_mode & 0o7777)
            os.replace(scratch, path)
    return len(hit)
