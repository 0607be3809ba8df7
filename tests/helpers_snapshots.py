"""State built once per module (a home with its DVC workspace and MLflow artifacts) and put back before each test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


class Snapshot:
    """Folders built once (a home, say, with its DVC workspace and MLflow artifacts) and put back before each test
    at the same absolute paths: MLflow and DVC record absolute paths (artifact locations, remotes, run sources),
    so a copy elsewhere would not be the same state. The pristine copies are kept beside, under `kept`."""

    def __init__(self, kept: Path, *folders: Path) -> None:
        self.pairs = [(folder, kept / f"{i}-{folder.name}") for i, folder in enumerate(folders)]
        for folder, copy in self.pairs:
            shutil.copytree(folder, copy, symlinks=True)

    def restore(self) -> None:
        """Each folder as it was when the snapshot was taken, whatever the last test did to it."""
        for folder, copy in self.pairs:
            if folder.exists() or folder.is_symlink():
                _writable(folder)
                shutil.rmtree(folder)
            shutil.copytree(copy, folder, symlinks=True)


def _writable(root: Path) -> None:
    """Folders a test left read-only made writable again, so that they can be removed."""
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
        if not os.access(folder, os.W_OK | os.X_OK):
            folder.chmod(folder.stat().st_mode | 0o700)
