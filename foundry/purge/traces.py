"""What Prefect and MLflow keep of a purged document in their own stores, not in files: the search (`scan`) and
the removal (`remove`) over both (`prefect_traces`, `mlflow_traces`; what they share: `trace_stores`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from foundry.purge import mlflow_traces, prefect_traces
from foundry.purge.artifacts import Needles
from foundry.purge.home import vacuum
from foundry.purge.plan import TraceHit
from foundry.purge.trace_stores import TraceNeedles


def scan(home: Path, client, needles: Needles) -> list[TraceHit]:
    """Every Prefect and MLflow record holding a needle. `PrefectUnreadable` or `TrackingUnreadable` when a store
    could not be searched whole: never "nothing there"."""
    found = TraceNeedles(needles)
    return prefect_traces.scan(home, found) + mlflow_traces.scan(home, client, found)


def remove(home: Path, client, needles: Needles, hits: Iterable[TraceHit]) -> dict[str, int]:
    """Each hit redacted or deleted as its `action` says (those left untouched); then the SQLite files changed
    vacuumed. Returns how many records changed, by store and kind."""
    found, hits = TraceNeedles(needles), [h for h in hits if h.action != "left"]
    counts: dict[str, int] = {}
    stores = [
        prefect_traces.remove(home, found, [h for h in hits if h.store == "prefect"], counts),
        mlflow_traces.remove(home, client, found, [h for h in hits if h.store == "mlflow"], counts),
    ]
    for path in sorted({p for store in stores for p in store.changed}):
        vacuum(path)
    return counts
