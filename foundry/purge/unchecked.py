"""Places under the home, and MLflow experiments, that a purge knows of but cannot read: reported as not checked
(`Unchecked`), so that `--apply` refuses (fail closed) rather than call them clean.

- A source mirror file that is not text (it holds a NUL byte): a gzip-compressed file, a parquet table, an archive
  with no extraction beside it. `prepare` reads such documents, the purge's text scan cannot. An http mirror's
  downloaded archive is read through its extraction (`extracted/` beside it: `purge_home` removes the mirror whole
  when that holds a match); an image is no document and is passed over.
- A hydration scratch folder (`hydrated/.pull-*`): a hydration in progress, or one that was killed, holding part of
  a data version that no listing names yet.
- An MLflow artifact file of a kind the purge neither reads as text nor knows to hold none (`purge_artifacts.unread`:
  a compressed table, an archive).
- An experiment with runs whose artifacts are kept outside the embedded store the purge reads
  (`$FOUNDRY_HOME/mlflow/artifacts`).
"""

from __future__ import annotations

import os
from pathlib import Path

from foundry.purge.artifacts import unread_files
from foundry.purge.plan import Unchecked
from foundry.purge.stores import local_path

IMAGES = {".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif"}


def _binary(path: Path) -> bool:
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            if b"\0" in chunk:
                return True
    return False


def _covered(path: Path, mirror: Path) -> bool:
    """An http mirror's download with its extraction beside it: the extraction holds what `prepare` read."""
    return path.parent == mirror and (mirror / "extracted").is_dir()


def _unread_mirror_files(sources: Path) -> dict[Path, int]:
    """Each mirror folder (`sources/<kind>/<mirror>`) -> how many of its files the purge cannot read."""
    found: dict[Path, int] = {}
    if sources.is_symlink() or not sources.is_dir():
        return found
    for folder, dirs, names in os.walk(sources, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            parts = path.relative_to(sources).parts
            if not path.is_file() or path.is_symlink() or path.suffix.lower() in IMAGES:
                continue
            mirror = sources.joinpath(*parts[:2]) if len(parts) > 2 else path.parent
            if _covered(path, mirror) or not _binary(path):
                continue
            found[mirror] = found.get(mirror, 0) + 1
    return found


def home_places(home: Path) -> list[Unchecked]:
    """Source mirror files the purge cannot read and hydrations in progress (see the module's docstring)."""
    found = []
    sources = home / "sources"
    for mirror, count in sorted(_unread_mirror_files(sources).items()):
        where = mirror.relative_to(home).as_posix()
        why = (
            f"a compressed source mirror file the purge cannot read ({count} in this mirror: gzip, parquet, an "
            "archive); remove the mirror (the next acquire downloads it again) or check it by hand"
        )
        found.append(Unchecked(what=f"source mirror {where}/…", why=why))
    hydrated = home / "hydrated"
    if hydrated.is_dir() and not hydrated.is_symlink():
        for scratch in sorted(hydrated.glob(".pull-*")):
            why = (
                "a hydration in progress (or one that was killed) holds part of a data version the purge cannot "
                "read; run the purge again when it is gone"
            )
            found.append(Unchecked(what=f"hydration scratch {scratch.relative_to(home).as_posix()}", why=why))
    return found


def experiments(locations: dict[str, tuple[str, str]], home: Path) -> list[Unchecked]:
    """Experiments with runs (`locations`: id -> (name, artifact location), those with runs only) whose artifact
    location is not inside the embedded store's `$FOUNDRY_HOME/mlflow/artifacts`: their artifacts are not read."""
    root = (home / "mlflow" / "artifacts").resolve()
    found = []
    for experiment_id, (name, location) in sorted(locations.items()):
        path = local_path(location) if location else None
        if path is not None and path.resolve().is_relative_to(root):
            continue
        why = f"its artifacts are kept at {location or 'no location'}, outside {root}: the purge does not read them"
        found.append(Unchecked(what=f"MLflow experiment {name} ({experiment_id})", why=why))
    return found


UNREAD = "a file of a kind the purge does not read (neither text nor a known binary): remove it, or check it by hand"


def artifact_files(root: Path) -> list[Unchecked]:
    """The embedded artifact store's files that the purge cannot read (`purge_artifacts.unread`), by artifact path."""
    return [Unchecked(what=f"MLflow artifact {relative}", why=UNREAD) for relative in unread_files(root)]
