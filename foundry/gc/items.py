"""What `foundry gc` may delete: one typed candidate per thing, its size, and why nothing keeps it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

KEEP_LAST = 5  # runs `foundry gc` keeps however old, besides what registered versions and running flows refer to
MIN_AGE_S = 3600.0  # anything changed more recently is left: work in progress may own it

Kind = Literal[
    "data version",  # a version's listing and the objects only it lists, in the workspace's DVC cache
    "cache objects",  # objects of the workspace's DVC cache that no version lists
    "hydrated copy",  # hydrated/<version>/
    "hydration cache",  # a version's listing and objects in hydrated/.cache (the node's DVC cache)
    "checkpoints",  # checkpoints/<key>/: training that never finished
    "run files",  # runs/<run id>/: a deleted or collected run's files
    "source mirror",  # sources/http|s3/<digest>/: a remote source's downloaded copy
    "model copy",  # models/<name>-v<version>/: a download of a version no longer registered
    "mlflow run",  # a run (soft-deleted) with its artifacts and unregistered logged models
]


@dataclass(frozen=True)
class Candidate:
    """One thing to delete. `ref` is what references are checked against (a data version, a run id, a source
    digest, a folder name); every path lies strictly inside `root`, which confines its deletion."""

    kind: Kind
    ref: str
    root: Path
    paths: tuple[Path, ...]
    bytes: int
    why: str
    ids: tuple[str, ...] = ()  # an MLflow run's logged models that go with it


def files_under(path: Path) -> Iterator[os.stat_result]:
    """The `lstat` of every file in `path` (itself, for a file), never following a symbolic link."""
    if path.is_symlink() or not path.exists():
        return
    if path.is_file():
        yield path.lstat()
        return
    for folder, _, names in os.walk(path, followlinks=False):
        for name in names:
            info = (Path(folder) / name).lstat()
            if not os.path.islink(Path(folder) / name):
                yield info


def size(paths: Iterable[Path]) -> int:
    """Bytes of the files under `paths`, each hard-linked file once."""
    seen: dict[tuple[int, int], int] = {}
    for path in paths:
        for info in files_under(path):
            seen[(info.st_dev, info.st_ino)] = info.st_size
    return sum(seen.values())


Stats = list[tuple[tuple[int, int], int, int]]  # (device, inode), size, links


def stats(item: Candidate) -> Stats:
    """What `freed` needs of an item's files, taken before they go."""
    return [((i.st_dev, i.st_ino), i.st_size, i.st_nlink) for path in item.paths for i in files_under(path)]


def freed(taken: Iterable[Stats]) -> int:
    """Bytes that deleting the files of `taken` frees: a hard-linked file counts only when every link to it goes
    (a hydrated copy shares its files with the hydration cache)."""
    links: dict[tuple[int, int], list[int]] = {}
    for entries in taken:
        for key, nbytes, nlink in entries:
            links.setdefault(key, [nbytes, nlink, 0])[2] += 1
    return sum(nbytes for nbytes, nlink, found in links.values() if found >= nlink)


def reclaimable(items: Iterable[Candidate]) -> int:
    return freed(stats(item) for item in items)


def newest_change(path: Path) -> float:
    """The latest modification time of `path` or anything in it (links not followed)."""
    times = [path.lstat().st_mtime] if path.exists() or path.is_symlink() else [0.0]
    times += [info.st_mtime for info in files_under(path)] if path.is_dir() else []
    return max(times)


def recent(path: Path, min_age_s: float) -> bool:
    """Whether `path` changed within the last `min_age_s` seconds: work in progress may own it."""
    return time.time() - newest_change(path) < min_age_s


def human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
