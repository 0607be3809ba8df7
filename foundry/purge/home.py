"""The places under `$FOUNDRY_HOME` besides the data stores that may hold a purged document's text, and the
Prefect artifacts; `scan` lists them (a dry run), `scrub` rewrites them (`foundry purge --apply`, step 6).

- `runs/<id>/`: source manifests (they name source files), validation reports and GX data docs, progress
  files, evaluation tables. A run's staging folder (`prepared/`, `merged/`: moved into place when the run
  succeeds, junk when it did not) that holds a match is removed whole: its token shards encode the same text.
- `sources/`: the mirrors of remote sources (`foundry.data.remote`). A matching file is removed and its mirror
  made stale, as `acquire` would otherwise trust it: an http mirror (one download, an archive's extraction
  beside it) is forgotten whole, since the archive still holds the text and a 304 answer would keep the copy
  without the file; an S3 mirror loses the object and its recorded ETag, so the next sync downloads it again.
- `logs/`: command and server logs, a line at a time.
- `ledgers/`: the split ledgers kept outside data versions (the alignment ledger): a row naming a matched
  document or the purged source is renamed, its split kept (`purge_ledgers`).
- a run's image plots that may show a matched image (`purge_artifacts.is_grid`: `runs/<id>/evaluation/`, the
  folder its MLflow copies were logged from): derived plots, deleted whole.
- Prefect artifacts (markdown summaries, tables on the run pages) through the Prefect API, so a server works
  too; one that cannot be read fails the purge (`PrefectUnreadable`), never passes for "nothing there".
- The MLflow artifacts `purge_artifacts.scan` finds (the plan's `ArtifactHit`s), rewritten by `scrub`; those a
  tracking server keeps (`ArtifactHit.store`) through MLflow's artifact repository (`served.rewrite`).

A file is read as text unless it holds a NUL byte; `.json` and `.jsonl` files are rewritten as such
(`purge_artifacts.scrubbed`), any other a line at a time. Symbolic links are never followed; every removal is
confined to its root (`foundry.core.fs`). Binary files hold no document text: model weights (`model.pt`, the
package's files), Lightning checkpoints (`last.ckpt`: weights, optimizer moments, step counters, the numeric
hyperparameters and the samplers' epoch and batch positions), adapters (`adapter.pt`, PEFT's safetensors) and
plots (`.png`). Token shards (`*.bin`, which do encode documents) are never logged as MLflow artifacts
(tasks/*.py log manifests, audits, reports, tokenizers, tables, checkpoints and models), and lie under a home
only in data stores (purged by `purge_commit`) and staging folders (removed here). A model trained on the
text is the registry step's business, not a rewrite.

Last, the embedded Prefect store (`prefect/prefect.db`) is checkpointed and vacuumed, after a Prefect artifact
changed and on every `--apply` (so that a vacuum a busy reader made fail is done by the next run), so that
neither a freed page nor the write-ahead log keeps the old text. A source mirror file is shown (`HomeHit.where`)
by its mirror's folder only: its name may be a person's; `HomeHit.path`, never serialised, is the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from foundry.purge import artifacts as purge_artifacts
from foundry.purge import ledgers, prefect_runs, served
from foundry.purge.artifacts import Needles
from foundry.purge.plan import ArtifactHit, HomeHit, PurgePlan
from foundry.purge.prefect_runs import PrefectUnreadable

__all__ = ["HomeHit", "PrefectUnreadable", "scan", "scrub", "vacuum", "vacuum_embedded"]
PLACES = {"runs": "run files", "sources": "source mirror", "logs": "log"}  # folder -> `HomeHit.place`
SCRATCH = ("prepared", "merged")  # `foundry.runtime.run_owner.SCRATCH`
# What the record counts an image plot deleted under: derived plots, deleted whole (`purge_artifacts.grids`).
GRID_PLACE = "run image plot (derived, deleted)"
GRID_ARTIFACT = "mlflow image plot (derived, deleted)"


def _text(path: Path) -> str | None:
    raw = path.read_bytes()
    return None if b"\0" in raw else raw.decode("utf-8", errors="surrogateescape")


def _workspace_files(home: Path) -> Iterator[Path]:
    """The workspace's own files (its source manifest names every source file), not `prepared/` or DVC's:
    those are a data version's, which the purge rewrites as a whole."""
    root = home / "workspace"
    if root.is_dir() and not root.is_symlink():
        yield from (p for p in sorted(root.iterdir()) if p.is_file() and not p.is_symlink())


def _skipped(path: Path) -> bool:
    """Lock files and a rewrite's own scratch; DVC's lock file is the workspace's record, read like the rest."""
    return path.name.endswith((".lock", ".purging")) and path.name != "dvc.lock"


def shown(relative: str) -> str:
    """A hit's `where`: a source mirror's file by its mirror's folder only (a source file's name may be a
    person's); any other path as it is."""
    parts = relative.split("/")
    return "/".join([*parts[:3], "…"]) if parts[0] == "sources" and len(parts) > 3 else relative


def _file_hits(home: Path, needles: Needles) -> Iterator[HomeHit]:
    places = [
        (path, place) for folder, place in PLACES.items() for path in purge_artifacts.regular_files(home / folder)
    ]
    for path, place in places + [(p, "workspace file") for p in _workspace_files(home)]:
        relative = path.relative_to(home).as_posix()
        if place == "run files" and purge_artifacts.is_grid(relative, needles):
            yield HomeHit(place=GRID_PLACE, where=relative, strings=1, path=relative)
            continue
        if _skipped(path) or (text := _text(path)) is None:
            continue
        _, count = purge_artifacts.scrubbed(text, path.suffix.lower(), needles.of(relative))
        if count:
            yield HomeHit(place=place, where=shown(relative), strings=count, path=relative)


def _ledger_hits(home: Path, needles: Needles) -> Iterator[HomeHit]:
    for path in ledgers.files(home):
        if rows := ledgers.count(path, needles):
            relative = path.relative_to(home).as_posix()
            yield HomeHit(place=ledgers.PLACE, where=relative, strings=rows, path=relative)


def scan(home: Path, needles: Needles, prefect: bool = True) -> list[HomeHit]:
    """The files under runs/, sources/, logs/ and ledgers/ and (unless `prefect` is False: the caller checks them some
    other way) the Prefect artifacts that hold a needle. Changes nothing."""
    found = [*_file_hits(home, needles), *_ledger_hits(home, needles)]
    if prefect:
        found += [HomeHit(place="prefect artifact", where=i, strings=n) for i, n in prefect_runs.hits(needles)]
    return found


def scrub(
    home: Path, needles: Needles, hits: PurgePlan | Sequence[HomeHit | ArtifactHit], vacuum_changed: bool = True
) -> dict[str, int]:
    """Rewrite (or remove) each hit (a plan's MLflow artifacts and other places) in place, as it is now: a second
    scrub finds and changes nothing. Then, unless `vacuum_changed` is False (`--apply` vacuums on every run,
    `vacuum_embedded`), vacuum the embedded Prefect store if an artifact of it changed. Returns how many files,
    folders or artifacts changed, per place."""
    if isinstance(hits, PurgePlan):
        hits = [*hits.artifacts, *hits.elsewhere]
    counts: dict[str, int] = {}
    artifacts = home / "mlflow" / "artifacts"
    for hit in hits:
        if isinstance(hit, ArtifactHit) and hit.holds == "plot":
            changed = served.rewrite(hit, needles) if hit.store else _delete(artifacts, hit.path)
            place = GRID_ARTIFACT
        elif isinstance(hit, ArtifactHit) and hit.store:
            place, changed = "mlflow artifacts", served.rewrite(hit, needles)
        elif isinstance(hit, ArtifactHit):
            place, changed = "mlflow artifacts", purge_artifacts.rewrite(artifacts / hit.path, artifacts, needles)
        elif hit.place == "prefect artifact":
            place, changed = hit.place, prefect_runs.rewrite(hit.where, needles)
        elif hit.place == GRID_PLACE:
            place, changed = hit.place, _delete(home / "runs", Path(hit.path).relative_to("runs"))
        elif hit.place == ledgers.PLACE:
            place, changed = hit.place, ledgers.rewrite(home, hit.path or hit.where, needles)
        elif hit.place == "source mirror":
            place, changed = hit.place, _scrub_source(home, home / (hit.path or hit.where), needles)
        else:
            place, changed = hit.place, _scrub_file(home, hit, needles)
        counts[place] = counts.get(place, 0) + bool(changed)
    if vacuum_changed and counts.get("prefect artifact"):
        counts.update(vacuum_embedded(home))
    return counts


def vacuum_embedded(home: Path) -> dict[str, int]:
    """The embedded Prefect store vacuumed (`vacuum`), if there is one: {"vacuumed": 1}, or {}."""
    store = prefect_runs.embedded_database(home)
    if store is None:
        return {}
    vacuum(store)
    return {"vacuumed": 1}


def _delete(root: Path, relative: str | Path) -> int:
    return purge_artifacts.delete(root / relative, root)


def _scrub_file(home: Path, hit: HomeHit, needles: Needles) -> int:
    from foundry.core.fs import remove_tree

    path = home / (hit.path or hit.where)
    parts = Path(hit.path or hit.where).parts
    root = home / parts[0]
    if parts[0] == "runs" and len(parts) > 3 and parts[2] in SCRATCH:  # runs/<id>/prepared/...
        scratch = root / parts[1] / parts[2]
        if not scratch.exists():
            return 0
        remove_tree(scratch, within=root)
        return 1
    if not path.is_file() or _text(path) is None:
        return 0
    return purge_artifacts.rewrite(path, root, needles)


def _scrub_source(home: Path, path: Path, needles: Needles) -> int:
    """A mirror's matching file removed, and the mirror made stale (see the module's docstring); a file that is
    no mirror's (an origin record, say) rewritten as text."""
    from foundry.core.fs import remove_file
    from foundry.data.remote import forget, locked

    root = home / "sources"
    parts = path.relative_to(root).parts
    if len(parts) < 3 or parts[0] not in ("http", "s3"):
        return purge_artifacts.rewrite(path, root, needles) if path.is_file() else 0
    mirror = root / parts[0] / parts[1]
    with locked(mirror):  # an acquire of the same source waits: it never reads a half-purged mirror
        if not path.is_file() or path.is_symlink():
            return 0
        if parts[0] == "http":
            forget(mirror)
            return 1
        remove_file(path, within=mirror)
        _forget_object(mirror, Path(*parts[2:]).as_posix())
    return 1


def _forget_object(mirror: Path, key: str) -> None:
    """An S3 mirror's record without the object's ETag: `sync_s3` downloads what it does not record."""
    state = mirror.parent / f"{mirror.name}.origin.json"
    try:
        recorded = json.loads(state.read_text())
    except (OSError, ValueError):
        return
    if recorded.pop(key, None) is not None:
        scratch = state.with_name(f"{state.name}.part")
        scratch.write_text(json.dumps(recorded, indent=1, sort_keys=True))
        os.replace(scratch, state)


# --- embedded stores -------------------------------------------------------------------------------------


def vacuum(db: Path) -> None:
    """The SQLite file rebuilt so that no freed page or slack keeps a rewritten row's old bytes: the write-ahead
    log folded in and emptied first (its frames hold old pages too), `VACUUM`, then folded in again (in WAL
    mode the rebuilt pages go through it). A reader holding the log open makes it fail: run the purge again."""
    connection = sqlite3.connect(db, timeout=60, isolation_level=None)  # VACUUM runs outside a transaction
    try:
        for statement in ("PRAGMA wal_checkpoint(TRUNCATE)", "VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"):
            row = connection.execute(statement).fetchone()
            if statement.startswith("PRAGMA") and row is not None and row[0]:
                raise sqlite3.OperationalError(f"{db}: the write-ahead log is busy (another process reads it)")
    finally:
        connection.close()
