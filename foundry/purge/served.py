"""MLflow artifacts a tracking server keeps: the artifact location of each experiment with runs (`mlflow-artifacts:/1`
when the server proxies them, or `s3://…`, a folder: any artifact repository MLflow can list), read and rewritten
through MLflow's own artifact repository, as `purge_artifacts` reads and rewrites the embedded store's files.

`scan` (the dry run) walks each location once, downloads the text files (`artifacts.is_text`: the runs'
`train.jsonl`/`holdout.jsonl`, audit excerpts, generated samples tables, and the logged models' configuration)
into a scratch folder outside the home, one at a time, and counts their strings as `artifacts.scan` does.
`rewrite` (`--apply`) downloads a hit again, scrubs it (`artifacts.scrubbed`) and logs it back to the same
artifact path, which overwrites it; one left empty is deleted. A location whose repository cannot delete an
artifact (MLflow's base class deletes nothing, silently) or that cannot be read is not checked, with the reason:
`--apply` refuses (fail closed), and an error while rewriting stops the purge, which is run again. An image plot
that may show a matched image (`artifacts.is_grid`) is a hit without being downloaded, and is deleted.
"""

from __future__ import annotations

import posixpath
import tempfile
from collections.abc import Iterator
from pathlib import Path

from foundry.purge import artifacts
from foundry.purge.artifacts import Needles
from foundry.purge.plan import ArtifactHit, Unchecked
from foundry.purge.unchecked import UNREAD


def _repository(location: str):
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    return get_artifact_repository(location)


def rewritable(repository) -> bool:
    """Whether a repository can overwrite and delete an artifact: one that inherits `delete_artifacts` from
    MLflow's base class deletes nothing, and one that inherits `log_artifact` cannot write."""
    from mlflow.store.artifact.artifact_repo import ArtifactRepository

    kind = type(repository)
    return all(
        getattr(kind, name) is not getattr(ArtifactRepository, name) for name in ("delete_artifacts", "log_artifact")
    )


def walk(repository, path: str | None = None) -> Iterator[str]:
    """Every file below `path` of a repository, by its path relative to the repository's root, in a stable order."""
    for info in sorted(repository.list_artifacts(path), key=lambda i: i.path):
        if info.is_dir:
            yield from walk(repository, info.path)
        else:
            yield info.path


def _scratch():
    return tempfile.TemporaryDirectory(prefix="foundry-purge-artifact-")


def _scan_location(location: str, needles: Needles) -> tuple[list[ArtifactHit], int, list[str]]:
    repository = _repository(location)
    if not rewritable(repository):
        raise PermissionError(
            f"its artifact repository ({type(repository).__name__}) cannot overwrite or delete an artifact: "
            "the purge could not remove a copy there"
        )
    found, read, unread = [], 0, []
    with _scratch() as scratch:
        for relative in walk(repository):
            if artifacts.is_grid(relative, needles):
                uri, run = f"{location.rstrip('/')}/{relative}", artifacts.run_of(Path(relative))
                found.append(ArtifactHit(path=uri, run_id=run, strings=1, store=location, holds="plot"))
                continue
            if not artifacts.is_text(posixpath.basename(relative)):
                if artifacts.unread(posixpath.basename(relative)):
                    unread.append(f"{location.rstrip('/')}/{relative}")
                continue
            local = Path(repository.download_artifacts(relative, scratch))
            read += 1
            strings = artifacts.count(local, needles.of(relative))
            local.unlink()
            if strings:
                uri = f"{location.rstrip('/')}/{relative}"
                run = artifacts.run_of(Path(relative))
                found.append(ArtifactHit(path=uri, run_id=run, strings=strings, store=location))
    return found, read, unread


def scan(experiments: dict[str, tuple[str, str]], needles: Needles) -> tuple[list[ArtifactHit], int, list[Unchecked]]:
    """The artifact files holding a needle in each experiment's artifact location (`experiments`: id -> (name,
    location), those with runs), how many text files were read, and the locations not checked (and why)."""
    by_location: dict[str, list[str]] = {}
    for experiment_id, (name, location) in sorted(experiments.items()):
        by_location.setdefault(location, []).append(f"{name} ({experiment_id})")
    found, read, unchecked = [], 0, []
    for location, names in sorted(by_location.items()):
        what = f"MLflow experiment{'s' if len(names) > 1 else ''} {', '.join(names)}"
        if not location:
            unchecked.append(Unchecked(what=what, why="it has no artifact location: the purge cannot read it"))
            continue
        try:
            hits, files, unread = _scan_location(location, needles)
        except Exception as exc:  # any error of the server or the store: not checked, never clean
            why = f"its artifacts at {location} cannot be read ({type(exc).__name__}: {exc})"
            unchecked.append(Unchecked(what=what, why=why))
            continue
        found += hits
        read += files
        unchecked += [Unchecked(what=f"MLflow artifact {uri}", why=UNREAD) for uri in unread]
    return found, read, unchecked


def rewrite(hit: ArtifactHit, needles: Needles) -> int:
    """One artifact (a hit of `scan`) scrubbed and logged back to its own path, or deleted when nothing is left
    of it (an image plot: deleted); how many strings or lines went. One that holds nothing to remove now is left untouched."""
    repository = _repository(hit.store)
    relative = hit.path.removeprefix(hit.store.rstrip("/") + "/")
    if hit.holds == "plot":  # a derived plot: deleted whole, if it is still there
        if relative not in set(walk(repository, posixpath.dirname(relative) or None)):
            return 0
        repository.delete_artifacts(relative)
        return 1
    with _scratch() as scratch:
        local = Path(repository.download_artifacts(relative, scratch))
        text = local.read_bytes().decode("utf-8", errors="surrogateescape")
        text, count = artifacts.scrubbed(text, local.suffix.lower(), needles.of(relative))
        if not count:
            return 0
        if not text.strip():
            repository.delete_artifacts(relative)
        else:
            local.write_bytes(text.encode("utf-8", errors="surrogateescape"))
            repository.log_artifact(str(local), posixpath.dirname(relative) or None)
    return count
