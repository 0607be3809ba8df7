"""MLflow artifacts that hold a matched document: copies of `train.jsonl`/`holdout.jsonl`, audit excerpts,
generated samples (`evaluation/generations.json`), validation reports, source manifests naming the file.

Every text file (by suffix) of the embedded artifact store (`$FOUNDRY_HOME/mlflow/artifacts`) is read, never
through a symbolic link: a JSON file as its string values, a JSON-lines file line by line, any other as a whole.
A string counts when the regex matches it (`--match`), when it holds the whole text of a document matched in a
data version, when it is one (by its sha256), or when it names one (its source file, or its ledger name). A
fragment of a document without the regex (a generation that repeats part of it) is found by `--match` only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from foundry.fleet.gc_scan import MD5
from foundry.fleet.purge_plan import ArtifactHit, Criterion, names_source

TEXT = {".json", ".jsonl", ".txt", ".md", ".csv", ".html", ".yaml", ".yml", ".log"}


def _files(root: Path) -> Iterator[Path]:
    if root.is_symlink() or not root.is_dir():
        return
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            if path.suffix.lower() in TEXT and path.is_file() and not path.is_symlink():
                yield path


def _leaves(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(key)
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)


def _strings(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            return list(_leaves(json.loads(text)))
        except ValueError:
            return [text]
    if suffix == ".jsonl":
        found = []
        for line in text.splitlines():
            try:
                found += list(_leaves(json.loads(line)))
            except ValueError:
                found.append(line)
        return found
    return [text]


class Needles:
    """What counts in an artifact's string: the criterion, and what the data versions matched."""

    def __init__(self, criterion: Criterion, texts: dict[str, str], names: set[str]):
        self.criterion = criterion
        self.texts = [t for t in texts.values() if t.strip()]
        self.shas = set(texts)
        self.names = names | ({criterion.value} if criterion.kind == "source" else set())

    def hit(self, value: str) -> bool:
        if self.criterion.kind == "match" and self.criterion.pattern.search(value):
            return True
        if any(text in value or text.rstrip("\n") == value for text in self.texts):
            return True
        if hashlib.sha256(value.encode("utf-8")).hexdigest() in self.shas:
            return True
        return any(names_source(value, name) for name in self.names)


def _run_of(relative: Path) -> str:
    return next((part for part in relative.parts if MD5.fullmatch(part)), "")


def scan(root: Path, needles: Needles) -> tuple[list[ArtifactHit], int]:
    """The artifact files holding a matched document, and how many text files were read."""
    found, read = [], 0
    for path in _files(root):
        read += 1
        count = sum(1 for value in _strings(path) if needles.hit(value))
        if count:
            relative = path.relative_to(root)
            found.append(ArtifactHit(path=relative.as_posix(), run_id=_run_of(relative), strings=count))
    return found, read
