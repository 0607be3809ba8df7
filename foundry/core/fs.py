"""Removing folders without ever leaving the folder meant to hold them.

Folder names come from values Foundry did not choose itself (a data version read from a registry tag, a
model name, a command-line path); one that is `..`, absolute or a symbolic link must not turn a clean-up
into the deletion of the home, the MLflow database or the DVC remote. Every `rmtree` goes through here.
"""

from __future__ import annotations

import shutil
from pathlib import Path


class OutsideFolder(ValueError):
    """A removal that would reach outside the folder it is confined to: refused, nothing removed."""


def confined(path: Path, within: Path) -> Path:
    """`path` resolved, when it lies strictly inside `within` (resolved too) and is not itself a symbolic link;
    otherwise `OutsideFolder`, naming both."""
    path, root = Path(path), Path(within).resolve()
    if path.is_symlink():  # its target may be anywhere; removing the link alone is not what a caller asked
        raise OutsideFolder(f"refusing to remove {path}: it is a symbolic link (to {path.resolve()}), not a folder")
    resolved = path.resolve()
    if resolved == root or not resolved.is_relative_to(root):
        raise OutsideFolder(f"refusing to remove {path} (resolved {resolved}): it is not inside {root}")
    return resolved


def remove_tree(path: Path, within: Path, ignore_errors: bool = False) -> None:
    """`shutil.rmtree(path)`, only for a folder strictly inside `within` (see `confined`). A refusal always
    raises; `ignore_errors` covers the removal itself (a folder already gone, say), as for `rmtree`.
    Symbolic links inside the tree are unlinked, never followed (`rmtree`'s own guarantee)."""
    shutil.rmtree(confined(path, within), ignore_errors=ignore_errors)


def remove_file(path: Path, within: Path) -> None:
    """`unlink` for one file strictly inside `within` (see `confined`): a symbolic link, a folder or a path that
    resolves elsewhere is refused (`OutsideFolder`); a file already gone is no error."""
    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return
    resolved = confined(path, within)
    if not resolved.is_file():
        raise OutsideFolder(f"refusing to remove {path}: it is not a regular file")
    resolved.unlink(missing_ok=True)
