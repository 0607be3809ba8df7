"""Acquire for images: the labelled images of every source, as (path, name, label) in a stable order.

The text side fetches: `foundry.data.acquire.local_root` mirrors an http(s) file or archive (zip, tar,
tar.gz, unpacked by `foundry.data.archives` with its limits on size, ratio, members and links) or an S3
prefix into `$FOUNDRY_HOME/sources/`, under the mirror's lock, with the same retries and size caps;
`sklearn://digits` is written by `foundry.vision.builtin`. This module reads the local folder it gets in
one of two layouts: class-per-subfolder (`<label>/**/<image>`), or an index (`image.index`, or the source
itself when it is a .csv/.jsonl file) of path,label rows whose paths are relative to the index.
"""

from __future__ import annotations

import csv
import json
import os
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from foundry.config import DataConfig
from foundry.data.acquire import holding_mirror, local_root
from foundry.data.formats import bounded_lines
from foundry.data.remote import SourceError, inside
from foundry.runtime.env import foundry_home
from foundry.vision import builtin
from foundry.vision.config import IMAGE_EXTENSIONS, INDEX_EXTENSIONS, ImageConfig, fetching_images

# An index line holds a path (at most 4096 bytes on Linux) and a label (at most 200 characters): a longer one is
# skipped unread.
INDEX_LINE_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class LabelledImage:
    # Where the bytes are now (a mirror is only valid while `listing` holds it). A string: a Path object and its
    # parts cost ~0.5 KB, 25 MB in a listing of 50,000 images.
    path: str
    name: str  # relative to its source root, prefixed "i/" when several sources: stable across machines
    label: str


@dataclass
class Listing:
    images: list[LabelledImage] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> names, in the order met

    def skip(self, reason: str, name: str, on_error: str, detail: str = "") -> None:
        if on_error == "fail":
            raise SourceError(f"{name}: {reason.replace('_', ' ')}{f' ({detail})' if detail else ''}")
        self.skipped.setdefault(reason, []).append(name)


def is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def _label_problem(label: str) -> str:
    if not label.strip():
        return "empty label"
    if len(label) > 200 or any(ord(ch) < 32 for ch in label):
        return "a label of control characters or over 200 characters"
    return ""


def _unwrap(root: Path) -> Path:
    """An archive's single top folder (`dataset/<label>/...`) is its root."""
    while True:
        entries = [entry for entry in root.iterdir() if not entry.name.startswith(".")]
        if len(entries) != 1 or not entries[0].is_dir():
            return root
        root = entries[0]


def _by_folder(root: Path, prefix: str, data: DataConfig, found: Listing) -> None:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in data.exclude_dirs)
        folder = Path(dirpath).relative_to(root).parts  # once a folder: per file it cost ~40 us of a digit's ~200
        within = prefix + "".join(f"{part}/" for part in folder)
        for filename in sorted(f for f in filenames if not f.startswith(".")):
            name = within + filename
            if not is_image(filename):
                found.skip("not_an_image_file", name, data.on_error, "not a .jpg, .jpeg, .png, .webp or .bmp name")
            elif not folder:
                found.skip("unlabelled", name, data.on_error, "outside any class folder")
            elif os.path.islink(path := os.path.join(dirpath, filename)) and not inside(Path(path), root):
                found.skip("symlink_outside_root", name, data.on_error)
            else:
                found.images.append(LabelledImage(path, name, folder[0]))


def _index_rows(index: Path) -> Iterator[tuple[int, dict | None, str]]:
    """(line number, row, why it is not one) for each line of an index. Each line is read within
    `INDEX_LINE_BYTES` and parsed alone, so a line too long, not UTF-8, nested past the stack or past csv's
    field limit is one bad row (skipped or fatal, by `data.on_error`), never the end of the listing."""
    is_csv, header = index.name.endswith(".csv"), None
    with open(index, "rb") as fh:
        for number, raw in bounded_lines(fh, INDEX_LINE_BYTES):
            if raw is None:
                yield number, None, f"a line longer than {INDEX_LINE_BYTES} bytes"
                continue
            try:
                text = raw.decode("utf-8").removeprefix("\ufeff" if number == 1 else "")
                if not text.strip():
                    continue
                if not is_csv:
                    record = json.loads(text)
                elif header is None:
                    header = next(csv.reader([text]))
                    continue
                else:
                    record = dict(zip(header, next(csv.reader([text]))))
            except UnicodeDecodeError:
                yield number, None, "not UTF-8"
            except RecursionError:
                yield number, None, "nested too deeply"
            except (ValueError, csv.Error) as exc:
                yield number, None, f"not {'CSV' if is_csv else 'JSON'}: {exc}"
            else:
                yield number, record if isinstance(record, dict) else None, ""


def _by_index(index: Path, prefix: str, data: DataConfig, found: Listing) -> None:
    base = index.parent
    for number, row, why in _index_rows(index):
        where = f"{prefix}{index.name}:{number}"
        path, label = (row.get("path"), row.get("label")) if row else (None, None)
        if not isinstance(path, str) or not isinstance(label, str) or not path:
            found.skip("malformed_index_row", where, data.on_error, why or "needs string path and label")
            continue
        if problem := _label_problem(label):
            found.skip("bad_label", where, data.on_error, problem)
            continue
        target = base / path
        name = prefix + Path(os.path.normpath(path)).as_posix()
        if Path(path).is_absolute() or not inside(target, base):
            found.skip("path_outside_root", where, data.on_error, f"{path!r} leaves the index's folder")
        elif not target.is_file():
            found.skip("missing_file", name, data.on_error, f"listed at {where}")
        elif not is_image(path):
            found.skip("not_an_image_file", name, data.on_error, "not a .jpg, .jpeg, .png, .webp or .bmp name")
        else:
            found.images.append(LabelledImage(str(target), name, label))


def _root(source: str, data: DataConfig, found: Listing) -> Path:
    cache = foundry_home() / "sources"
    if builtin.is_builtin(source):
        return builtin.materialise(source, cache)
    skipped: dict[str, int] = {}
    root, _ = local_root(source, cache, fetching_images(data), skipped)
    for reason, count in skipped.items():  # archive members left out (links, special files)
        found.skipped.setdefault(reason, []).extend([source] * count)
    if isinstance(root, str):
        raise SourceError(f"data.source {source!r}: an image source is a folder, an index file or an archive")
    scheme = urllib.parse.urlparse(source).scheme
    return _unwrap(root) if scheme in ("http", "https") and root.is_dir() else root


def _list_source(source: str, prefix: str, data: DataConfig, image: ImageConfig, found: Listing) -> None:
    root = _root(source, data, found)
    if root.is_file():
        if not root.name.endswith(INDEX_EXTENSIONS):
            raise SourceError(f"data.source {source!r} is a single file: give a folder, or a .csv/.jsonl index")
        _by_index(root, prefix, data, found)
    elif image.index:
        if not (root / image.index).is_file():
            raise SourceError(f"data.source {source!r} holds no index file {image.index!r} (image.index)")
        _by_index(root / image.index, prefix, data, found)
    else:
        _by_folder(root, prefix, data, found)


@contextmanager
def listing(data: DataConfig, image: ImageConfig) -> Iterator[Listing]:
    """Every labelled image of every source; remote mirrors stay locked until the block ends, so read them there.

    A source that cannot be read stops the run (as for text, when it is the only one or `on_error` is fail);
    a bad entry is skipped and named, or stops the run in fail mode."""
    sources, found = data.source_list, Listing()
    with ExitStack() as held:
        for i, source in enumerate(sources):
            held.enter_context(holding_mirror(source, foundry_home() / "sources"))
            try:
                _list_source(source, f"{i}/" if len(sources) > 1 else "", data, image, found)
            except SourceError as exc:
                if data.on_error == "fail" or len(sources) == 1:
                    raise
                found.skip("unreachable_source", f"{source} ({exc})", "skip")
        if not found.images:
            raise SourceError(f"data.source {', '.join(sources)!r} holds no labelled images {IMAGE_EXTENSIONS}")
        yield found
