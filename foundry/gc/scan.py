"""Where `foundry gc` looks, one function per kind of state under `$FOUNDRY_HOME`, each returning the
candidates that nothing kept (`gc_refs.Kept`) refers to.

Symbolic links are never candidates and never followed: a link planted where a folder is expected stays.
Anything changed within `min_age_s` is left alone, as work in progress may own it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from foundry.gc.items import Candidate, Kind, newest_change, recent, size
from foundry.gc.refs import Kept

MD5 = re.compile(r"[0-9a-f]{32}")
UNREFERENCED = "no registered version, running flow or kept run refers to it"


def _entries(folder: Path) -> list[Path]:
    """Real (not linked) sub-folders of `folder`, sorted; none when it is missing or itself a link."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink())


def cache_files(cache: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """A DVC cache's version listings and its other objects, by md5: ({version: .dir}, {md5: object})."""
    listings, objects = {}, {}
    for prefix in _entries(cache / "files" / "md5"):
        for path in prefix.iterdir():
            if path.is_symlink() or not path.is_file():
                continue
            md5 = prefix.name + path.name.removesuffix(".dir")
            if MD5.fullmatch(md5):
                (listings if path.name.endswith(".dir") else objects)[md5] = path
    return listings, objects


def _listed(path: Path) -> set[str] | None:
    """The md5s a `.dir` listing names; None when it cannot be read (then nothing of its cache is collected)."""
    try:
        return {entry["md5"] for entry in json.loads(path.read_bytes())}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def protected_objects(cache: Path, versions: set[str]) -> set[str] | None:
    """The md5s that the listings of `versions` present in `cache` name; None when one cannot be read."""
    listings, _ = cache_files(cache)
    protected: set[str] = set()
    for version in versions & set(listings):
        listed = _listed(listings[version])
        if listed is None:
            return None
        protected |= listed
    return protected


def dvc_cache(cache: Path, kept: Kept, kinds: tuple[Kind, Kind], min_age_s: float) -> list[Candidate]:
    """Each version of a DVC cache that nothing keeps, with the objects only it lists, then the objects no version
    lists. A version that stays keeps every object it lists; one whose listing is unreadable keeps the whole cache."""
    listings, objects = cache_files(cache)
    doomed = {v for v, p in listings.items() if v not in kept.data_versions and not recent(p, min_age_s)}
    protected = protected_objects(cache, set(listings) - doomed)
    if protected is None:
        return []
    found, claimed = [], set(protected)
    for version in sorted(doomed):
        own = sorted((_listed(listings[version]) or set()) - claimed)
        claimed |= set(own)
        paths = (listings[version], *(objects[m] for m in own if m in objects))
        found.append(Candidate(kinds[0], version, cache, paths, size(paths), UNREFERENCED))
    unlisted = tuple(p for m, p in sorted(objects.items()) if m not in claimed and not recent(p, min_age_s))
    if unlisted:
        found.append(Candidate(kinds[1], "unlisted", cache, unlisted, size(unlisted), "no data version lists them"))
    return found


def hydrated_copies(home: Path, kept: Kept, min_age_s: float) -> list[Candidate]:
    hydrated = home / "hydrated"
    found = []
    for folder in _entries(hydrated):
        if MD5.fullmatch(folder.name) and folder.name not in kept.data_versions and not recent(folder, min_age_s):
            found.append(Candidate("hydrated copy", folder.name, hydrated, (folder,), size([folder]), UNREFERENCED))
    return found


def checkpoints(home: Path, kept: Kept, min_age_s: float) -> list[Candidate]:
    """Unfinished training older than the last N runs: none of them can resume it (a re-run that resumes a
    folder writes into it, so a folder one of them used changed after that run started)."""
    root = home / "checkpoints"
    found = []
    for folder in _entries(root):
        changed = newest_change(folder)
        if changed * 1000 >= kept.since_ms or recent(folder, min_age_s):
            continue
        why = "unfinished training older than the kept runs"
        found.append(Candidate("checkpoints", folder.name, root, (folder,), size([folder]), why))
    return found


def run_folders(home: Path, kept: Kept, client, min_age_s: float, collected: set[str]) -> list[Candidate]:
    """`runs/<id>/` of a run being collected (`collected`), deleted already, or gone from the tracking store. A
    run of another experiment that still exists, or one too recent to collect, is not gc's to judge."""
    from mlflow.exceptions import MlflowException

    root = home / "runs"
    found = []
    for folder in _entries(root):
        run_id = folder.name
        if run_id in kept.runs or recent(folder, min_age_s):
            continue
        if run_id in kept.candidate_runs and run_id not in collected:
            continue
        if run_id not in collected:
            try:
                if client.get_run(run_id).info.lifecycle_stage != "deleted":
                    continue
            except MlflowException as exc:
                if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
        why = "its MLflow run is collected, deleted or gone"
        found.append(Candidate("run files", run_id, root, (folder,), size([folder]), why))
    return found


def source_mirrors(home: Path, kept: Kept, min_age_s: float) -> list[Candidate]:
    found = []
    for scheme in ("http", "s3"):
        root = home / "sources" / scheme
        for folder in _entries(root):
            if folder.name in kept.sources or recent(folder, min_age_s):
                continue
            paths = (folder, *[p for p in [root / f"{folder.name}.origin.json"] if p.is_file() and not p.is_symlink()])
            why = "a download no kept run read"
            found.append(Candidate("source mirror", folder.name, root, paths, size(paths), why))
    return found


def model_copies(home: Path, kept: Kept, min_age_s: float) -> list[Candidate]:
    root = home / "models"
    found = []
    for folder in _entries(root):
        if folder.name.startswith(".") or folder.name in kept.model_folders or recent(folder, min_age_s):
            continue
        why = "a download of a version no longer registered"
        found.append(Candidate("model copy", folder.name, root, (folder,), size([folder]), why))
    return found


def local_folder(uri: str, root: Path) -> Path | None:
    """The folder a `file:` artifact URI names, when it lies inside `root` (the embedded store's artifacts)."""
    parts = urlparse(uri)
    if parts.scheme not in ("file", ""):
        return None
    path = Path(unquote(parts.path))
    return path if path.is_absolute() and path.resolve().is_relative_to(root.resolve()) else None


def mlflow_runs(home: Path, kept: Kept, client, min_age_s: float) -> list[Candidate]:
    """Runs of the experiment nothing keeps, with their artifacts and their logged models that no version
    registers, when those lie in the embedded store (a server's are freed by its own `mlflow gc`)."""
    import time

    root = home / "mlflow" / "artifacts"
    logged = _logged_models(client, kept.experiment_id) if kept.candidate_runs else {}
    found = []
    for run_id, run in sorted(kept.candidate_runs.items()):
        if time.time() * 1000 - (run.info.start_time or 0) < min_age_s * 1000:
            continue
        models = [m for m in logged.get(run_id, []) if m.model_id not in kept.logged_models]
        uris = [run.info.artifact_uri, *(m.artifact_location for m in models)]
        paths = tuple(p for p in (local_folder(u, root) for u in uris) if p is not None and p.is_dir())
        why = f"status {run.info.status}; {UNREFERENCED}"
        ids = tuple(m.model_id for m in models)
        found.append(Candidate("mlflow run", run_id, root, paths, size(paths), why, ids))
    return found


def _logged_models(client, experiment_id: str | None) -> dict[str, list]:
    """The experiment's logged models by the run that logged them."""
    if experiment_id is None:
        return {}
    by_run: dict[str, list] = {}
    token = None
    while True:
        page = client.search_logged_models([experiment_id], max_results=100, page_token=token)
        for model in page:
            by_run.setdefault(model.source_run_id, []).append(model)
        token = page.token
        if not token:
            return by_run
