"""Glob sources without following links out of the pattern's root or round a loop.

`glob.glob` follows every symlinked folder: a `loop -> .` link listed one file once per level until
the path grew too long, and a link to `/etc` was read as if it were part of the corpus. Here the
folder above the first wildcard is the root; a linked folder is entered only while it resolves inside
that root and is not already on the way down. Matching keeps glob's rules: `**` spans any number of
folders, and a wildcard never matches a name that starts with a dot.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterator
from pathlib import Path

Refused = list[tuple[Path, str]]  # (path, reason) for each link left out


def glob_base(pattern: str) -> Path:
    """The folder above the first path component that holds a wildcard."""
    parts = Path(pattern).parts
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    return Path(*parts[:fixed])


def glob_files(pattern: str) -> tuple[list[Path], Refused]:
    """The files matching an absolute `pattern`, sorted, and the linked folders that were not entered."""
    base = glob_base(pattern)
    pats = Path(pattern).parts[len(base.parts) :]
    depth = None if "**" in pats else len(pats) - 1  # no `**`: never deeper than the pattern
    refused: Refused = []
    if not base.is_dir():
        return [], refused
    real_base = base.resolve()
    dots = any(p.startswith(".") for p in pats)
    found = []
    for path in _walk(base, real_base, frozenset({real_base}), depth, dots, refused):
        if not _matches(path.relative_to(base).parts, pats):
            continue
        if path.is_symlink() and not path.resolve().is_relative_to(real_base):
            refused.append((path, "symlink_outside_root"))
        else:
            found.append(path)
    return sorted(found), refused


def _walk(
    folder: Path, root: Path, chain: frozenset[Path], depth: int | None, dots: bool, refused: Refused
) -> Iterator[Path]:
    """Every file under `folder`; `chain` holds the real folders on the way down (a loop revisits one).
    Dot-folders are entered only when the pattern names one (no wildcard would match inside them)."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return  # unreadable or vanished: glob skips these too
    for entry in entries:
        path = Path(entry.path)
        if entry.is_file():
            yield path
        elif entry.is_dir() and depth != 0 and (dots or not entry.name.startswith(".")):
            real = path.resolve()
            if not real.is_relative_to(root):
                refused.append((path, "symlink_outside_root"))
            elif real in chain:
                refused.append((path, "symlink_loop"))
            else:
                yield from _walk(path, root, chain | {real}, None if depth is None else depth - 1, dots, refused)


def _matches(parts: tuple[str, ...], pats: tuple[str, ...]) -> bool:
    if not pats:
        return not parts
    if not parts:
        return all(p == "**" for p in pats)
    if pats[0] == "**":
        return _matches(parts, pats[1:]) or (not _hidden(parts[0], "*") and _matches(parts[1:], pats))
    return not _hidden(parts[0], pats[0]) and fnmatch.fnmatchcase(parts[0], pats[0]) and _matches(parts[1:], pats[1:])


def _hidden(name: str, pat: str) -> bool:
    """glob's rule: a wildcard does not match a leading dot; a literal `.name` still does."""
    return name.startswith(".") and not pat.startswith(".")
