"""`foundry purge --apply`: remove every copy the search finds, in an order that makes a purge that fails half-way
safe to run again (it finds what is left and finishes):

1. search (`search.survey`); refuse when the registry cannot be read, or when any place could not be checked (an
   `s3://` remote, a server's artifact store, a version with no copy here), even when nothing else matched: fail
   closed, nothing is changed;
2. mark every affected data version purged and record the documents' sha256 (`foundry.data.purged`): from then
   on hydration, `reproduce` and the next run's parent ledger refuse or avoid it, `prepare` drops the
   documents should a source still hold them (sources are never modified), and every later search looks for
   their sha256 in the artifacts, so that a re-run finds copies whose data version is already gone;
3. rewrite each affected version without the documents (`purge_rewrite`), commit the rewrite as a new version
   into the workspace cache and every local remote that held the old one (`purge_commit`), and name it in the
   mark; a version that cannot be rewritten is only deleted;
4. scrub the MLflow artifacts, run files, source mirrors, logs and Prefect artifacts that hold them
   (`purge_home`), and Prefect's and MLflow's own records (`purge_traces`: those no API nor file of Foundry's can
   change are left, and the record lists them in `left_in_stores`): while the old versions are still there, a failure here leaves a re-run everything it needs
   to find the copies;
5. delete the old versions: their hydrated and checked-out copies, in every cache and remote the objects they
   list (the documents' text among them) that no kept version lists, then (last) the listings; and finish every marked version a
   store still lists (a purge stopped while deleting it); then vacuum the embedded Prefect store, on every run
   (a vacuum a busy reader made fail is done by the next);
6. tag the affected model versions and runs with the record, take every alias from the versions (unless
   `keep_models`), keep the record as an MLflow run, and search again: the record is verified when that finds
   no document, no marked version still listed anywhere and no affected model untagged.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

from foundry.core.fs import remove_tree
from foundry.data import purged
from foundry.purge import commit as purge_commit
from foundry.purge import home as purge_home
from foundry.purge import record as purge_record
from foundry.purge import rewrite as purge_rewrite
from foundry.purge import search
from foundry.purge import traces as purge_traces
from foundry.purge.plan import LEFT_IN_STORES, Criterion, DataHit
from foundry.purge.record import PurgeRecord

log = logging.getLogger(__name__)


class PurgeRefused(RuntimeError):
    """`--apply` would leave copies it cannot see; nothing was changed."""


def apply(
    home: Path,
    criterion: Criterion,
    reason: str,
    remotes: set[str] | None = None,
    keep_models: bool = False,
    client=None,
) -> PurgeRecord | None:
    """The purge record, kept in MLflow; None when nothing matched and no model is left to tag."""
    client = client or search._client()
    found = search.survey(home, criterion, reason, remotes, client)
    if found.plan.unchecked:  # before "nothing to do": a copy in a place not checked is not "no copy"
        places = "; ".join(f"{u.what}: {u.why}" for u in found.plan.unchecked)
        raise PurgeRefused(f"purge --apply refuses: it could not check {places}. Nothing was changed.")
    if not _work_left(found):
        return None
    record_id, when = purge_record.new_record_id(), datetime.now(UTC).isoformat(timespec="seconds")
    hits = found.plan.data_versions
    if found.plan.documents:
        purged.record_documents(home, record_id, set(found.plan.documents))
    for hit in hits:
        purged.mark(
            home, purged.PurgeMark(data_version=hit.data_version, record=record_id, replaced_by=None, when=when)
        )
    removed: dict[str, int] = {}
    replaced = _replace(home, found, hits, record_id, when, removed)
    _count(removed, purge_home.scrub(home, found.needles, found.plan, vacuum_changed=False))
    _count(removed, purge_traces.remove(home, client, found.needles, found.plan.traces))
    _delete(found, hits, replaced, removed)
    _count(removed, purge_home.vacuum_embedded(home))  # every run: one a busy reader made fail is done again
    lost = purge_record.tag_models(client, record_id, found.plan.models, keep_models)
    purge_record.tag_runs(client, record_id, found.plan.runs)
    again = search.survey(home, criterion, reason, remotes, client)
    left = {k: n for k, n in again.plan.counts.items() if n and k not in ("model versions", LEFT_IN_STORES)}
    if unfinished := _unfinished(again):
        left["data versions still listed"] = len(unfinished)
    if untagged := [m for m in again.plan.models if m.purge_record is None]:
        left["model versions untagged"] = len(untagged)
    record = PurgeRecord(
        record=record_id,
        who=purge_record.who(),
        when=when,
        reason=reason,
        criterion=purge_record.criterion_label(home, criterion),
        criterion_hash=purge_record.KEYED,
        documents=found.plan.documents,
        replaced=replaced,
        removed=removed,
        models=tuple(m.model for m in found.plan.models),
        lost_champion=tuple(lost),
        runs=found.plan.runs,
        verified=_nothing_left(again.plan) and not unfinished and not untagged,
        left=left,
        left_in_stores=tuple(t.label for t in again.plan.traces if t.action == "left"),
    )
    return purge_record.keep(client, record)


def _replace(home: Path, found, hits, record_id: str, when: str, removed: dict[str, int]) -> dict[str, str | None]:
    """Each affected version rewritten and committed; its mark then names the replacement."""
    replaced: dict[str, str | None] = {}
    scratch = home / f".purge-{record_id}"
    try:
        for hit in hits:
            staged = scratch / hit.data_version
            rewritten = purge_rewrite.rewrite(
                found.readable[hit.data_version], hit, set(found.plan.documents), found.names, staged
            )
            new = None
            if rewritten is not None:
                new = purge_commit.commit(found.places, rewritten.folder, _remotes_holding(found.places, hit))
                _count(removed, rewritten.removed)
            replaced[hit.data_version] = new
            mark = purged.PurgeMark(data_version=hit.data_version, record=record_id, replaced_by=new, when=when)
            purged.mark(home, mark)
            log.info("purge %s: data version %s is now %s", record_id, hit.data_version, new or "deleted")
    finally:
        remove_tree(scratch, within=home, ignore_errors=True)
    return replaced


def _remotes_holding(places, hit: DataHit) -> list:
    """The local remotes that held the old version: the replacement goes where its users will look for data."""
    remotes = [s for s in places.stores if s.place == "remote" and s.listing(hit.data_version) is not None]
    return remotes or [s for s in places.stores if s.place == "remote"][:1]


def _delete(found, hits, replaced: dict[str, str | None], removed: dict[str, int]) -> None:
    """The old versions deleted, then every marked version a store still lists (an earlier purge stopped while
    deleting it): its listed objects that no kept version lists, then its listing."""
    home = found.places.home
    gone = {h.data_version for h in hits} | purged.marked(home)
    stays = (found.places.versions() | set(found.readable) | {v for v in replaced.values() if v}) - gone
    keep = purge_commit.kept_objects(found.places, stays)
    for hit in hits:
        # Every object the old version lists, not only those holding the documents: one deleted with no
        # replacement leaves none of its data behind; `keep` protects what a kept version (a replacement) lists.
        objects = {f.md5 for f in hit.files} | set(found.readable[hit.data_version].listing.values())
        _count(removed, purge_commit.delete_version(found.places, hit.data_version, objects, keep))
    for version, objects in purge_commit.unfinished(found.places, purged.marked(home)).items():
        log.info("purge: finishing the deletion of data version %s, which a store still lists", version)
        _count(removed, purge_commit.delete_version(found.places, version, objects, keep))


def _unfinished(again) -> dict[str, set[str]]:
    return purge_commit.unfinished(again.places, purged.marked(again.places.home))


def _count(total: dict[str, int], more: dict[str, int]) -> None:
    for key, n in more.items():
        total[key] = total.get(key, 0) + n


def _work_left(found) -> bool:
    """Copies to remove, a model an earlier, interrupted purge of these documents did not finish tagging, or a
    marked version a store still lists (an earlier purge stopped while deleting it)."""
    plan = found.plan
    return not _nothing_left(plan) or any(m.purge_record is None for m in plan.models) or bool(_unfinished(found))


def _nothing_left(plan) -> bool:
    """Nothing found, and nothing the search could not read (an S3 or server error is never "none left")."""
    changeable = any(t.action != "left" for t in plan.traces)  # those left are listed in the record, not work
    return not (
        plan.documents or plan.data_versions or plan.artifacts or plan.elsewhere or plan.unchecked or changeable
    )
