"""A checkpoint folder's manifest: which files are checkpoints, of which step, with which sha256.

A checkpoint folder holds

    step-000250.ckpt   Lightning checkpoints: model, optimizer, scheduler, loop counters, the train
                       loader's position (`RandomWindows.state_dict`) and the RNG states
    manifest.json      one entry per checkpoint: file, step, sha256, bytes, val_loss
    last.ckpt          a hard link to the newest one, for people and for MLflow

Only files listed in the manifest with a matching checksum are resumed from; every file is written
under a temporary name, fsynced and renamed, so a crash at any point of a save leaves the previous
state intact.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from foundry.core.digests import sha256_file

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
LAST = "last.ckpt"


@dataclass(frozen=True)
class Entry:
    file: str
    step: int
    sha256: str
    bytes: int
    val_loss: float | None = None

    def __post_init__(self) -> None:
        # read back from manifest.json and unlinked when pruned: a name in this folder, nothing else
        if not isinstance(self.file, str) or self.file in ("", ".", "..") or Path(self.file).name != self.file:
            raise ValueError(f"checkpoint manifest entry {self.file!r} is not a file name in its folder")


def read_manifest(directory: Path) -> list[Entry]:
    path = directory / MANIFEST
    if not path.is_file():
        return []
    return [Entry(**e) for e in json.loads(path.read_text())["checkpoints"]]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _HashingWriter:
    """A file that hashes what passes through it, so a checkpoint is read back zero times."""

    def __init__(self, f):
        self.f, self.sha, self.bytes = f, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.bytes += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


class DiskFull(OSError):
    """A checkpoint (or the manifest) did not fit: the message names the folder and its free space."""


def write_atomic(path: Path, write: Callable[[Any], None]) -> tuple[str, int]:
    """Write through a temporary name, fsync, rename, fsync the folder; returns (sha256, bytes). A write that
    fails leaves no temporary file (a partial one would hold the space the next try needs), and a full disk
    is `DiskFull`; the files already there are untouched either way."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            writer = _HashingWriter(f)
            write(writer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if _out_of_space(exc):
            raise _disk_full(path) from exc
        raise
    _fsync_dir(path.parent)
    return writer.sha.hexdigest(), writer.bytes


def _out_of_space(exc: BaseException | None) -> bool:
    """Whether `exc` or what it was raised from is a full disk or quota: torch.save reports one as a
    `RuntimeError` ("unexpected pos") raised while handling the `OSError`."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _disk_full(path: Path) -> DiskFull:
    usage = shutil.disk_usage(path.parent)
    return DiskFull(
        errno.ENOSPC,
        f"no space left in {path.parent} to write {path.name}: {usage.free} bytes free of {usage.total}; the "
        "checkpoints written before it are intact: free space there (or lower checkpoint.keep_last) and run "
        "again to resume from the newest",
    )


def write_manifest(directory: Path, entries: list[Entry]) -> None:
    text = json.dumps({"checkpoints": [asdict(e) for e in sorted(entries, key=lambda e: e.step)]}, indent=1)
    write_atomic(directory / MANIFEST, lambda f: f.write(text.encode()))


def is_intact(directory: Path, entry: Entry) -> bool:
    path = directory / entry.file
    return path.is_file() and path.stat().st_size == entry.bytes and sha256_file(path) == entry.sha256


def latest_valid(directory: Path) -> Entry | None:
    """The newest checkpoint whose checksum matches; newer broken ones are skipped with a warning."""
    for entry in sorted(read_manifest(directory), key=lambda e: e.step, reverse=True):
        if is_intact(directory, entry):
            return entry
        log.warning(
            "checkpoint %s (step %d) is missing, truncated or corrupt: its sha256 does not match "
            "the manifest; falling back to the previous one",
            directory / entry.file,
            entry.step,
        )
    return None


def retained(entries: list[Entry], keep_last: int) -> list[Entry]:
    """The last `keep_last` by step, plus the one with the lowest validation loss."""
    keep = sorted(entries, key=lambda e: e.step)[-keep_last:]
    scored = [e for e in entries if e.val_loss is not None]
    if scored:
        best = min(scored, key=lambda e: (e.val_loss, -e.step))
        keep += [] if best in keep else [best]
    return sorted(keep, key=lambda e: e.step)
