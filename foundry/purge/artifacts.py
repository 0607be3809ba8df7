"""MLflow artifacts that hold a matched document: copies of `train.jsonl`/`holdout.jsonl`, audit excerpts,
generated samples (`evaluation/generations.json`), validation reports, source manifests naming the file.

Every text file (by suffix) of the embedded artifact store (`$FOUNDRY_HOME/mlflow/artifacts`) is read, never
through a symbolic link: a JSON file as its string values, a JSON-lines file line by line, any other as a whole.
A string counts when the regex matches it (`--match`), when it holds the whole text of a document matched in a
data version, when it is one (by its sha256: of this purge's documents or any an earlier purge removed), or when
it names one (its source file, or its ledger name, as a whole name: `purge_plan.names_in`). A fragment of a
document without the regex (a generation that repeats part of it) is found by `--match` only. Configuration and
code (`CONFIG`: a logged model's `MLmodel`, environment files, `config.json`, input examples, anything under a
`code/` folder; the workspace's params and DVC files) are never matched by the regex, which could match a word
of a requirement or a path: only documents' texts, sha256s and names count there.

An image version's documents are pixels, which no text search finds; a run evaluated on one keeps a grid of its
misclassified holdout images (`grids`: the plots a workload names as showing its data, `Workload.data_plots`,
here `foundry.vision.evaluate`'s): each such plot of a run in `Needles.grid_runs`
(the runs trained or evaluated on an affected image version) is a hit that holds a "plot". A plot is derived from
the data, not data, and is not decoded: `--apply` deletes it whole (`delete`), here, in a run's folder under the
home (`purge_home`) and on a tracking server (`purge_served`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from foundry.core import workload
from foundry.gc.scan import MD5
from foundry.purge.plan import ArtifactHit, Criterion, names_in

TEXT = {".json", ".jsonl", ".txt", ".md", ".csv", ".tsv", ".html", ".css", ".js", ".svg", ".yaml", ".yml", ".log"}
# Files known to hold no document text, passed over: weights, arrays, pickles, pictures (an image plot of data
# is one of `grids`), the fonts of validation docs, and what MLflow logs with a model (its code, `registered_model_meta`).
# Any other file (`unread`: a compressed table, an archive) is listed as not checked, and `--apply` refuses.
KNOWN = {".pt", ".pth", ".ckpt", ".safetensors", ".gguf", ".npy", ".npz", ".bin", ".pkl", ".py", ".pyc"}
KNOWN |= {".png", ".jpg", ".jpeg", ".gif", ".ico", ".woff", ".woff2", ".ttf", ".eot"}
MODEL_FILES = {"registered_model_meta"}
# A tokenizer's vocabulary holds pieces of every word it was trained on; rewriting one would break the models
# that ship it, and it holds no document. What it learned from purged text stays (docs/fleet.md: purge's limits).
NOT_TEXT = {"tokenizer.json"}
# Configuration and code: read for exact texts, sha256s and names, never rewritten by the regex.
CONFIG = {"config.json", "MLmodel", "conda.yaml", "python_env.yaml", "requirements.txt"}
CONFIG |= {"params.yaml", "dvc.yaml", "dvc.lock"}  # the workspace's


def grids() -> frozenset[str]:
    """The plots, by file name, that show data images themselves (tasks/evaluation.py logs them under
    `evaluation/`): those the workloads name (`Workload.data_plots`); a confusion matrix or a loss curve shows none."""
    return workload.data_plots()


def is_config(relative: str | Path) -> bool:
    """Whether a file (its path below the artifact store, or the home) is configuration or code."""
    parts = Path(relative).parts
    return bool(parts) and (parts[-1] in CONFIG or parts[-1].endswith("_example.json") or "code" in parts[:-1])


def regular_files(root: Path) -> Iterator[Path]:
    """Every regular file below `root` in a stable order, never through a symbolic link (nor `root` itself one)."""
    if root.is_symlink() or not root.is_dir():
        return
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                yield path


def is_text(name: str) -> bool:
    """Whether an artifact file, by its name, is one the purge reads: by suffix, configuration by name, never a
    tokenizer."""
    return name not in NOT_TEXT and (Path(name).suffix.lower() in TEXT or name in CONFIG)


def unread(name: str) -> bool:
    """Whether an artifact file, by its name, is neither read (`is_text`) nor known to hold no text (`KNOWN`)."""
    known = name in NOT_TEXT or name in MODEL_FILES or Path(name).suffix.lower() in KNOWN
    return not known and not is_text(name)


def unread_files(root: Path) -> list[str]:
    """The files below `root` (by their path below it) that the purge neither reads nor knows to hold no text."""
    return [p.relative_to(root).as_posix() for p in regular_files(root) if unread(p.name)]


def _leaves(value, whole: bool = True) -> Iterator[tuple[str, bool]]:
    """Each string of a JSON value, and whether it stands as a whole value (`Needles.hit`'s `whole`): a key or a
    string item of a list does not (`["email", "phone"]` lists words, which a bare source name must not match)."""
    if isinstance(value, str):
        yield value, whole
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key, False
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, whole=False)


def _strings(path: Path) -> list[tuple[str, bool]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            return list(_leaves(json.loads(text)))
        except ValueError:
            return [(text, True)]
    if suffix == ".jsonl":
        found = []
        for line in text.splitlines():
            try:
                found += list(_leaves(json.loads(line)))
            except ValueError:
                found.append((line, True))
        return found
    return [(text, True)]


class Needles:
    """What counts in an artifact's string: the criterion, and what the data versions matched."""

    def __init__(
        self,
        criterion: Criterion,
        texts: dict[str, str],
        names: set[str],
        shas: set[str] = frozenset(),
        grid_runs: set[str] = frozenset(),
    ):
        """`shas`: more document sha256s to find (those earlier purges removed, whose data may be gone);
        `grid_runs`: the runs whose image plots (`grids`) may show a matched image."""
        self.grid_runs = frozenset(grid_runs)
        self.criterion = criterion
        self.texts = [t for t in texts.values() if t.strip()]
        self.shas = set(texts) | set(shas) | ({criterion.value} if criterion.kind == "document" else set())
        self.names = {n for n in names | ({criterion.value} if criterion.kind == "source" else set()) if n}
        self.regex = criterion.pattern if criterion.kind == "match" else None

    def exact(self) -> Needles:
        """The same needles without the regex: for configuration and code (`is_config`)."""
        found = copy.copy(self)
        found.regex = None
        return found

    def unnamed(self) -> Needles:
        """The same needles without the names: for a store's records, which look for names their own way
        (`trace_stores.TraceNeedles`)."""
        found = copy.copy(self)
        found.names = set()
        return found

    def of(self, relative: str | Path) -> Needles:
        """The needles for one file, by its path below the store or home."""
        return self.exact() if self.regex is not None and is_config(relative) else self

    def hit(self, value: str, whole: bool = True) -> bool:
        """Whether `value` holds a needle; `whole` False for a JSON key or list item (`purge_plan.names_in`)."""
        if self.regex is not None and self.regex.search(value):
            return True
        if any(text in value or text.rstrip("\n") == value for text in self.texts):
            return True
        if hashlib.sha256(value.encode("utf-8")).hexdigest() in self.shas:
            return True
        return any(names_in(value, name, whole) for name in self.names)


def count(path: Path, needles: Needles) -> int:
    """How many strings of a text artifact file (read as `scan` reads one) hold a needle."""
    return sum(1 for value, whole in _strings(path) if needles.hit(value, whole))


def run_of(relative: Path) -> str:
    return next((part for part in relative.parts if MD5.fullmatch(part)), "")


def is_grid(relative: str | Path, needles: Needles) -> bool:
    """Whether a file (below the artifact store or the home) is an image plot of a run that may show a matched
    image: named as one (`grids`), under a run of `needles.grid_runs`."""
    relative = Path(relative)
    return relative.name in grids() and run_of(relative) in needles.grid_runs


def scan(root: Path, needles: Needles) -> tuple[list[ArtifactHit], int]:
    """The artifact files holding a matched document, or (`is_grid`) showing one; how many text files were read."""
    found, read = [], 0
    for path in regular_files(root):
        relative = path.relative_to(root)
        if is_grid(relative, needles):
            found.append(ArtifactHit(path=relative.as_posix(), run_id=run_of(relative), strings=1, holds="plot"))
            continue
        if not is_text(path.name):
            continue
        read += 1
        if strings := count(path, needles.of(relative)):
            found.append(ArtifactHit(path=relative.as_posix(), run_id=run_of(relative), strings=strings))
    return found, read


def delete(path: Path, within: Path) -> int:
    """An image plot (`is_grid`) strictly inside `within` deleted, never through a symbolic link: 1, or 0 when
    it is gone already."""
    from foundry.core.fs import remove_file

    if not path.is_file() or path.is_symlink():
        return 0
    remove_file(path, within=within)
    return 1


# --- rewriting (`foundry purge --apply`) ---------------------------------------------------------------------

PURGED = "[purged]"


def _replacement(needles: Needles) -> str:
    return "" if needles.hit(PURGED) else PURGED  # a regex matching the marker itself: a second scrub finds nothing


def scrubbed_value(value, needles: Needles) -> tuple[object, int]:
    """A JSON value with every string (value or key) that holds a needle replaced by "[purged]", and how many."""
    return _scrubbed_value(value, needles, _replacement(needles))


def _scrubbed_value(value, needles: Needles, marker: str, whole: bool = True) -> tuple[object, int]:
    """A JSON value with every string (value or key) that holds a needle replaced by `marker`, and how many;
    a key or a list's string item counted as `_leaves` counts it."""
    if isinstance(value, str):
        return (marker, 1) if needles.hit(value, whole) else (value, 0)
    if isinstance(value, list):
        pairs = [_scrubbed_value(item, needles, marker, whole=False) for item in value]
        return [item for item, _ in pairs], sum(n for _, n in pairs)
    if isinstance(value, dict):
        out, count = {}, 0
        for key, item in value.items():
            if needles.hit(key, whole=False):
                key, count = _free(out, marker), count + 1
            out[key], n = _scrubbed_value(item, needles, marker)
            count += n
        return out, count
    return value, 0


def _free(taken: dict, marker: str) -> str:
    """`marker`, or `marker 2`, `marker 3`...: two keys replaced in one object stay two."""
    return next(name for i in range(1, len(taken) + 2) if (name := marker if i == 1 else f"{marker} {i}") not in taken)


def _spanned(lines: list[str], needles: Needles) -> set[int]:
    """The lines a needle spans when it runs over a line break: a regex match, or a multi-line document."""
    text, starts, at = "".join(lines), [], 0
    for line in lines:
        starts.append(at)
        at += len(line)
    spans = [m.span() for m in needles.regex.finditer(text)] if needles.regex is not None else []
    for needle in needles.texts:
        for piece in {needle, needle.rstrip("\n")} - {""}:
            start = text.find(piece)
            while start >= 0:
                spans.append((start, start + len(piece)))
                start = text.find(piece, start + 1)
    return {i for i, s in enumerate(starts) for a, b in spans if s < max(b, a + 1) and a < s + len(lines[i])}


def scrub_lines(text: str, needles: Needles) -> tuple[str, int]:
    """Plain text without the lines a needle spans (a regex match or a document, over line breaks too: every
    line of it goes, not only the one that matches) or a line holding one, then empty if the whole still holds
    one (`scan` reads it whole); and how many lines went. The lines kept are byte-identical."""
    lines = text.splitlines(keepends=True)
    drop = _spanned(lines, needles) | {i for i, line in enumerate(lines) if needles.hit(line.rstrip("\r\n"))}
    kept = [line for i, line in enumerate(lines) if i not in drop]
    if needles.hit("".join(kept)):
        kept = []
    return "".join(kept), len(lines) - len(kept)


def _jsonl_hit(line: str, needles: Needles) -> bool:
    try:
        return any(needles.hit(value, whole) for value, whole in _leaves(json.loads(line)))
    except ValueError:
        return needles.hit(line.rstrip("\r\n"))


def scrubbed(text: str, suffix: str, needles: Needles) -> tuple[str, int]:
    """`text` (a file's, of that suffix) rewritten: a JSON-lines line holding a needle dropped, a JSON string
    holding one replaced by "[purged]", a line of any other text dropped; and how many were. Read as `scan` does."""
    if suffix == ".jsonl":
        lines = text.splitlines(keepends=True)
        kept = [line for line in lines if not _jsonl_hit(line, needles)]
        return "".join(kept), len(lines) - len(kept)
    if suffix == ".json":
        try:
            value = json.loads(text)
        except ValueError:
            return scrub_lines(text, needles)
        value, count = scrubbed_value(value, needles)
        if not count:
            return text, 0
        indent = 1 if "\n" in text.strip() else None
        return json.dumps(value, indent=indent, ensure_ascii=False) + ("\n" if text.endswith("\n") else ""), count
    return scrub_lines(text, needles)


def rewrite(path: Path, within: Path, needles: Needles) -> int:
    """One regular text file strictly inside `within` rewritten in place (`scrubbed`; replaced whole, never through
    a symbolic link); how many strings or lines went. A file holding nothing to remove is left untouched."""
    from foundry.core.fs import confined

    path = confined(path, within)
    if not path.is_file():
        return 0
    raw = path.read_bytes()
    needles = needles.of(path.relative_to(Path(within).resolve()))
    text, count = scrubbed(raw.decode("utf-8", errors="surrogateescape"), path.suffix.lower(), needles)
    if count:
        scratch = path.with_name(f".{path.name}.purging")
        scratch.write_bytes(text.encode("utf-8", errors="surrogateescape"))
        os.chmod(scratch, path.stat().st_mode & 0o7777)
        os.replace(scratch, path)
    return count
