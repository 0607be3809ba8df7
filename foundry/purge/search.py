"""`foundry purge`: find every copy of the documents a deletion request names, and everything trained on them.

The search (the dry run, and the first step of `--apply`: `purge_apply`) reads and changes nothing but memory:
1. the registry and the runs (`purge_registry`), first: if they cannot be read, the purge refuses
   (`RegistryUnreadable`) before looking at data, since a model trained on the documents could be missed;
2. every data version Foundry knows (`purge_stores`): those in the workspace's DVC cache, the hydration cache
   and each local DVC remote (the default `$FOUNDRY_HOME/dvc-remote`, `data.remote`, and every remote a version
   or run names), the hydrated copies, the workspace's checked-out version, and those the registry or a run
   names; each is read from the first place that holds it whole;
3. in each, as the workload of its data reads it, the matching documents, then every file and position holding
   them or naming them (`purge_data`): split files, documents table, token shards (decoded, each span verified),
   ledger and signatures, audit; in an image version (`foundry.vision.purge`), images by pixel sha256 or source
   path (a regex: label and source path), their table rows, WebDataset shard members (decoded, each verified),
   ledger rows and dHash signatures, audit;
4. the MLflow artifacts that hold them: the embedded store's files (`purge_artifacts`), or, with a tracking
   server, each experiment's artifact location through MLflow's artifact repository (`purge_served`); and the
   other files under the home and the Prefect artifacts that do (`purge_home`); for an image version, the
   misclassified-images grids of the runs trained or evaluated on it (derived plots: deleted whole);
5. the registered versions trained on a version holding their text, and every descendant of those;
6. the records Prefect and MLflow keep in their own stores that hold them or name them (`purge_traces`): flow-run
   parameters, state messages, logs and events; run params, tags and dataset inputs, version and model tags and
   descriptions, each with what `--apply` can do to it (through the API, in a SQLite file Foundry owns, or left).
An `s3://` DVC remote is read with boto3 (`purge_s3`). What cannot be read (an `s3://` remote that does not
answer, a remote of another scheme, a local remote that is no folder here, a version with no copy here, a
server's artifact location that cannot be read or whose repository cannot delete, an embedded store's
experiment keeping its artifacts elsewhere, a compressed source mirror file, a hydration in progress:
`purge_unchecked`) is listed as not checked, never taken as clean; a version an earlier purge
removed (marked, `foundry.data.purged`) is not. The documents earlier purges removed are looked for too (by
sha256), so that a purge run again after its data versions went still finds their copies. The plan holds counts and ids, never the text (`purge_plan`).

    foundry purge (--match REGEX | --document SHA256 | --source PATH) --reason TEXT [--json] [--apply]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from foundry.core import workload
from foundry.data import purged
from foundry.data.ledger import LEDGER
from foundry.gc.refs import RegistryUnreadable
from foundry.purge import artifacts as purge_artifacts
from foundry.purge import data as purge_data
from foundry.purge import home as purge_home
from foundry.purge import record, served
from foundry.purge import registry as purge_registry
from foundry.purge import traces as purge_traces
from foundry.purge import unchecked as purge_unchecked
from foundry.purge.data import Matched, VersionFiles
from foundry.purge.plan import Criterion, DataHit, PurgePlan, Unchecked, summary
from foundry.purge.stores import Places

log = logging.getLogger(__name__)
__all__ = ["Criterion", "PurgePlan", "RegistryUnreadable", "Survey", "plan", "summary", "survey"]


def _client():
    from foundry.runtime.tracking import client

    return client()


@dataclass(frozen=True)
class Survey:
    """What a search found, with what `--apply` needs besides the plan (in memory only: `texts` holds text)."""

    plan: PurgePlan
    places: Places
    readable: dict[str, VersionFiles]
    needles: purge_artifacts.Needles
    names: set[str]


def plan(home: Path, criterion: Criterion, reason: str, remotes: set[str] | None = None, client=None) -> PurgePlan:
    """Everything `--apply` would have to change; changes nothing. `RegistryUnreadable` when the registry or the
    runs cannot be read whole. `remotes`: DVC remotes to read besides those the registry names (`data.remote`)."""
    return survey(home, criterion, reason, remotes, client).plan


def survey(home: Path, criterion: Criterion, reason: str, remotes: set[str] | None = None, client=None) -> Survey:
    if not reason.strip():
        raise ValueError("--reason is required: the purge record says why the documents were removed")
    client = client or _client()
    registry = purge_registry.read(client)
    places = Places.of(home, {str(home / "dvc-remote"), *(remotes or set()), *registry.remotes})
    named = registry.named()
    readable, unread = _readable(places, set(named) | places.versions(), named)
    matched, broken = _matched(readable, criterion)
    unread.update(broken)
    texts = {sha: text for found in matched.values() for sha, text in found.texts.items()}
    shas = set(texts).union(*(purge_data.listed_shas(f, criterion) for f in readable.values()))
    names = set().union(*(purge_data.ledger_names(f, criterion, shas) for f in readable.values()))
    names |= _unledgered_names(readable, matched)
    hits = [hit for v, f in readable.items() if (hit := _hit(v, f, criterion, matched[v], shas, names, places))]
    now = {h.data_version for h in hits if h.holds_text}
    before = _purged_earlier(home, registry)
    earlier = purge_registry.affected_models(registry, before)
    models = purge_registry.affected_models(registry, now) + [m for m in earlier if m.purge_record is None]
    # Every document an earlier purge removed counts too: a purge that failed after its data versions went
    # finds their artifact copies by sha256 when run again, with no data version left to read the text from.
    # The image plots of the runs on an image version holding a matched image (or on one an earlier purge
    # removed: a purge stopped before deleting them, run again) may show it: `purge_artifacts.grids`.
    plotted = {v for v in now if workload.for_manifest(readable[v].manifest()).plots_show_data}
    grids = purge_registry.evaluated_runs(registry, plotted | before)
    needles = purge_artifacts.Needles(criterion, texts, names, purged.purged_documents(home), grids)
    artifacts, read, unchecked = _artifacts(home, needles, registry)
    elsewhere = tuple(purge_home.scan(home, needles))
    traces = tuple(purge_traces.scan(home, client, needles))
    unchecked = places.unchecked({h.data_version: h.files for h in hits}, unread) + unchecked
    unchecked += purge_unchecked.home_places(home)
    found = PurgePlan(
        criterion=record.criterion_label(home, criterion, create=False),  # a dry run makes no key
        reason=reason,
        documents=tuple(sorted(shas)),
        data_versions=tuple(hits),
        artifacts=tuple(artifacts),
        elsewhere=elsewhere,
        traces=traces,
        models=tuple(sorted({m.model: m for m in models}.values(), key=lambda m: purge_registry.order(m.model))),
        runs=tuple(purge_registry.affected_runs(registry, now)),
        unchecked=tuple(unchecked),
        scanned={"data versions": len(readable), "artifact files": read, "registered versions": len(registry.data)},
    )
    return Survey(found, places, readable, needles, names)


def _artifacts(home: Path, needles, registry) -> tuple[list, int, list[Unchecked]]:
    from foundry.runtime.env import uses_embedded_mlflow

    if uses_embedded_mlflow():
        root = home / "mlflow" / "artifacts"
        found, read = purge_artifacts.scan(root, needles)
        return (
            found,
            read,
            purge_unchecked.experiments(registry.experiments, home) + purge_unchecked.artifact_files(root),
        )
    return served.scan(registry.experiments, needles)


def _purged_earlier(home: Path, registry) -> set[str]:
    """Data versions the registry names that a purge already removed (marked): their models are affected too, so
    that a purge that failed after removing the data, run again, still tags them."""
    return {v for v in registry.named() if purged.mark_of(home, v) is not None}


def _unledgered_names(readable: dict[str, VersionFiles], matched: dict[str, Matched]) -> set[str]:
    """The sources (`file:line`) of the matched records of versions that carry no ledger of their own (alignment
    data: its ledger lies under `$FOUNDRY_HOME/ledgers/`, naming records so): names to look for, as a ledger's."""
    return {
        d.source
        for version, files in readable.items()
        if LEDGER not in files.listing
        for d in matched[version].documents
        if d.source
    }


def _readable(places: Places, versions: set[str], named: dict[str, str]) -> tuple[dict, dict[str, str]]:
    """Versions with a whole copy here; the others, unless a purge removed them (marked), are not checked."""
    readable, unread = {}, {}
    for version in sorted(versions):
        if (files := places.files(version)) is not None:
            readable[version] = files
        elif purged.mark_of(places.home, version) is None:
            unread[version] = f"{named.get(version, 'found')}, but no whole copy of it on this machine"
    return readable, unread


def _matched(readable: dict[str, VersionFiles], criterion: Criterion) -> tuple[dict[str, Matched], dict[str, str]]:
    """Each readable version's matching documents; one that cannot be read as a dataset moves to `unread`."""
    matched, broken = {}, {}
    for version, files in list(readable.items()):
        try:
            # An image's `text` is empty: no artifact is searched for it; its table row, shard members and
            # ledger row are found by its pixels' sha256 or its source path (`foundry.vision.purge`).
            matched[version] = workload.for_manifest(files.manifest()).purge_matching(files, criterion)
        except (OSError, ValueError, KeyError) as exc:
            log.warning("purge cannot read data version %s: %s", version, exc)
            broken[version] = f"cannot be read as a prepared dataset ({type(exc).__name__}: {exc})"
            del readable[version]
    return matched, broken


def _hit(version, files, criterion, matched: Matched, shas, names, places: Places) -> DataHit | None:
    locations = tuple(workload.for_manifest(files.manifest()).purge_locations(files, criterion, matched, shas, names))
    if not locations:
        return None
    own = {d.sha256 for d in matched.documents}
    return DataHit(
        data_version=version,
        kind=files.manifest().kind,
        documents=tuple(sorted(own)),
        listed=tuple(sorted(purge_data.listed_shas(files, criterion, shas) - own)),
        files=locations,
        copies=tuple(places.copies(version, locations)),
    )
