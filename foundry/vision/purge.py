"""Purging images from an image data version (`foundry.vision.stage`'s folder): finding them, and writing the
version again without them.

An image is named by the sha256 `images.csv` and `ledger.csv` record: of its decoded, fitted pixels with their
shape (`foundry.vision.decode.pixel_sha256`), not of the source file's bytes (a source's metadata is stripped
before it is hashed); or by its source path (`images.csv`'s `source`, the ledger's `name`). A regex is matched
against an image's label and source path only: pixels are never read as text, and an image has no text to
look for elsewhere (its `Document.text` is empty, which the artifact needles pass over).

The table, the shards and the ledger are written in step: the n-th image of a split in `images.csv` is the
n-th `{key}.png`/`{key}.cls` pair of the split's shards in `shards.json`'s order (`foundry.vision.shards`).
A member found so is decoded and its pixels' sha256 compared with the row's ("verified"). A rewrite drops the
rows, the members (each shard keeps its name, its remaining members renumbered as `write_shards` numbers
them; a shard left empty goes), the ledger rows with their dHash signatures and the audit entries naming the
images; every other image's PNG bytes stay, in their split and order, and the counts and digests follow.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import shutil
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from foundry.core.digests import fast_digest, sha256_file
from foundry.data.ledger import LEDGER, SIGNATURES
from foundry.data.manifest import FILE as MANIFEST
from foundry.data.manifest import SPLITS, DatasetManifest
from foundry.purge.cuts import Inconsistent
from foundry.purge.data import Document, Matched, VersionFiles, ledger_locations
from foundry.purge.plan import Criterion, DataHit, Location, names_in

log = logging.getLogger(__name__)
TABLE = "images.csv"  # foundry.vision.table.TABLE
AUDIT = "audit.json"


def images(files: VersionFiles) -> list[Document]:
    """Every image of the version, in table order: `line` is its place in its split (from 1), as in the shards."""
    with open(files.path(TABLE), encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    seen: Counter = Counter()
    found = []
    for n, row in enumerate(rows, 2):  # row 1 is the header
        seen[row["split"]] += 1
        found.append(Document(row["sha256"], row["split"], seen[row["split"]], n, row["source"], ""))
    return found


def _labels(files: VersionFiles) -> dict[int, str]:
    with open(files.path(TABLE), encoding="utf-8", newline="") as fh:
        return {n: row["label"] for n, row in enumerate(csv.DictReader(fh), 2)}


def matching(files: VersionFiles, criterion: Criterion) -> Matched:
    """The images the criterion names: by pixel sha256, by source path, or a regex on the label or source path."""
    if criterion.kind != "match":
        return Matched([d for d in images(files) if criterion.selects("", d.sha256, d.source)])
    labels, pattern = _labels(files), criterion.pattern
    return Matched([d for d in images(files) if pattern.search(labels[d.row]) or pattern.search(d.source)])


def locations(
    files: VersionFiles, criterion: Criterion, matched: Matched, shas: set[str], names: set[str]
) -> list[Location]:
    """Table rows and shard members of the matched images, their ledger rows and signatures, audit entries."""
    hits = matched.documents
    found = []
    if hits:
        found.append(files.location(TABLE, "row", [f"row {d.row}" for d in hits]))
        found += _members(files, hits)
    found += ledger_locations(files, criterion, shas)
    found += _audit(files, criterion, names | {d.source for d in hits})
    return found


# --- shards ------------------------------------------------------------------------------------------------


def _shard_manifest(files: VersionFiles):
    from foundry.vision.shards import FILE, ShardManifest  # torch comes with it: image versions only

    return ShardManifest.model_validate_json(files.path(FILE).read_bytes())


def _open(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path)
    except tarfile.TarError as exc:
        raise Inconsistent(f"{path}: not a readable tar shard ({exc})") from None


def _pairs(tar: tarfile.TarFile) -> Iterator[tuple[str, tarfile.TarInfo, tarfile.TarInfo]]:
    """(key, png member, cls member) in written order; anything else in the shard is an `Inconsistent`."""
    try:
        members = tar.getmembers()
    except tarfile.TarError as exc:
        raise Inconsistent(f"{tar.name}: not a readable tar shard ({exc})") from None
    if len(members) % 2:
        raise Inconsistent(f"{tar.name}: an odd number of members, not (png, cls) pairs")
    for png, cls in zip(members[::2], members[1::2]):
        key = png.name.removesuffix(".png")
        if png.name != f"{key}.png" or cls.name != f"{key}.cls" or not (png.isfile() and cls.isfile()):
            raise Inconsistent(f"{tar.name}: {png.name}, {cls.name} is not a WebDataset (png, cls) pair")
        yield key, png, cls


def _where(manifest, split: str, line: int) -> tuple[str, int]:
    """The shard holding the split's `line`-th image, and its place there (from 0)."""
    start = 0
    for shard in manifest.shards_of(split):
        if line - 1 < start + shard.images:
            return shard.file, line - 1 - start
        start += shard.images
    raise Inconsistent(f"shards.json holds {start} {split} images, the table more")


def _members(files: VersionFiles, hits: list[Document]) -> list[Location]:
    from foundry.vision.decode import pixel_sha256
    from foundry.vision.shards import decode_png

    manifest = _shard_manifest(files)
    wanted: dict[str, dict[int, Document]] = {}
    for doc in hits:
        shard, place = _where(manifest, doc.split, doc.line)
        wanted.setdefault(shard, {})[place] = doc
    found = []
    for shard, places in sorted(wanted.items()):
        entries = []
        with _open(files.path(shard)) as tar:
            for place, (key, png, _) in enumerate(_pairs(tar)):
                if (doc := places.get(place)) is not None:
                    pixels = decode_png(tar.extractfile(png).read()).numpy()
                    pixels = pixels[0] if pixels.shape[0] == 1 else pixels.transpose(1, 2, 0)
                    ok = "verified" if pixel_sha256(pixels) == doc.sha256 else "does NOT decode to the image"
                    entries.append(f"row {doc.row}: {key}.png, {key}.cls ({ok})")
        found.append(files.location(shard, "image", entries))
    return found


def _pack(path: Path, source: Path, keep) -> int:
    """The shard at `source` without the images `keep(place)` refuses, into `path`; returns images kept."""
    from foundry.vision.shards import pack

    def kept():
        with _open(source) as tar:
            for place, (_, png, cls) in enumerate(_pairs(tar)):
                if keep(place):
                    yield tar.extractfile(png).read(), int(tar.extractfile(cls).read())

    return pack(path, kept())


# --- the audit ------------------------------------------------------------------------------------------------


def _named(entry: str, criterion: Criterion, names: set[str]) -> bool:
    """An audit entry (`name` or `name: detail`) naming a matched image, or whose name the regex matches."""
    if criterion.kind == "match" and criterion.pattern.search(entry.split(": ", 1)[0]):
        return True
    if criterion.kind == "source" and names_in(entry, criterion.value):
        return True
    return any(names_in(entry, name) for name in names if name)


def _audit(files: VersionFiles, criterion: Criterion, names: set[str]) -> list[Location]:
    if AUDIT not in files.listing:
        return []
    audit = json.loads(files.path(AUDIT).read_text(encoding="utf-8"))
    entries = [
        f"{reason} entry {k}"
        for reason, dropped in sorted(audit.get("dropped", {}).items())
        for k, entry in enumerate(dropped.get("named", []), 1)
        if _named(entry, criterion, names)
    ]
    return [files.location(AUDIT, "name", entries)] if entries else []


# --- the rewrite ------------------------------------------------------------------------------------------------


def rewrite(files: VersionFiles, hit: DataHit, gone: set[str], names: set[str], out: Path) -> dict[str, int] | None:
    """The version without the images of `gone` (pixel sha256s), written into the empty folder `out`; what was
    removed, by kind. None when a split would be left without images. `Inconsistent` when its files disagree."""
    manifest = DatasetManifest.model_validate_json(files.path(MANIFEST).read_bytes())
    raw = files.path(TABLE).read_bytes()
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))
    if _csv_bytes(rows) != raw:
        raise Inconsistent(f"{TABLE} is not written as prepare writes it: its rows would not keep their bytes")
    header, body = rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]
    kept = [r for r in body if r["sha256"] not in gone]
    if empty := [s for s in SPLITS if not any(r["split"] == s for r in kept)]:
        log.warning("purge: %s would hold no %s images; it is deleted, not rewritten", hit.data_version, empty)
        return None
    removed = {"images": len(body) - len(kept)}
    for split in SPLITS:
        removed[f"{split} images"] = sum(1 for r in body if r["split"] == split and r["sha256"] in gone)
    changed = {TABLE}
    (out / TABLE).write_bytes(_csv_bytes([header] + [[r[k] for k in header] for r in kept]))
    shards, dropped = _shards(files, body, gone, kept, out, changed, removed)
    ledger = _ledger(files, gone, out, changed, removed)
    _rewrite_audit(files, hit, [r for r in body if r["sha256"] in gone], names, out, changed, removed)
    for name in files.listing:  # everything else, byte for byte
        if name != MANIFEST and name not in dropped and not (out / name).exists():
            shutil.copyfile(files.path(name), out / name)
    _manifest(manifest, shards, removed, ledger, changed, dropped, out)
    return removed


def _shards(files, body, gone, kept, out: Path, changed: set[str], removed: dict[str, int]):
    """Each shard of a split holding a removed image, written again without its members; empty ones dropped."""
    from foundry.vision.shards import ShardManifest

    old = _shard_manifest(files)
    shards, dropped = [], set()
    for split in SPLITS:
        mine = [r["sha256"] in gone for r in body if r["split"] == split]
        if sum(s.images for s in old.shards_of(split)) != len(mine):
            raise Inconsistent(f"shards.json holds other {split} images than {TABLE}")
        start = 0
        for shard in old.shards_of(split):
            span = mine[start : start + shard.images]
            start += shard.images
            if not any(span):
                shards.append(shard)
                continue
            images = _pack(out / shard.file, files.path(shard.file), lambda place, span=span: not span[place])
            if images != shard.images - sum(span):
                raise Inconsistent(f"{shard.file} holds other images than shards.json says")
            removed["shard members"] = removed.get("shard members", 0) + 2 * sum(span)
            if images == 0:
                (out / shard.file).unlink()
                dropped.add(shard.file)
                continue
            shards.append(shard.model_copy(update={"images": images, "sha256": sha256_file(out / shard.file)}))
            changed.add(shard.file)
    counts = {s: dict(sorted(Counter(r["label"] for r in kept if r["split"] == s).items())) for s in SPLITS}
    new = ShardManifest(classes=old.classes, shape=old.shape, counts=counts, shards=shards)
    new.write(out)
    changed.add("shards.json")
    return new, dropped


def _ledger(files, gone: set[str], out: Path, changed: set[str], removed: dict[str, int]) -> int | None:
    """The ledger without the removed images' rows and their dHash signatures (row for row)."""
    import numpy as np

    if LEDGER not in files.listing:
        return None
    raw = files.path(LEDGER).read_bytes()
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))
    if _csv_bytes(rows) != raw:
        raise Inconsistent(f"{LEDGER} is not written as prepare writes it")
    sha = rows[0].index("sha256")
    drop = [i for i, row in enumerate(rows[1:]) if row[sha] in gone]
    removed["ledger rows"] = len(drop)
    if drop:
        (out / LEDGER).write_bytes(_csv_bytes([rows[0]] + [r for r in rows[1:] if r[sha] not in gone]))
        changed.add(LEDGER)
    if SIGNATURES in files.listing:
        signatures = np.load(files.path(SIGNATURES))
        if len(signatures) != len(rows) - 1:
            raise Inconsistent(f"{len(rows) - 1} ledger rows but {len(signatures)} signatures")
        if drop:
            np.save(out / SIGNATURES, np.delete(signatures, drop, axis=0))
            changed.add(SIGNATURES)
        removed["signatures"] = len(drop)
    return len(rows) - 1 - len(drop)


def _rewrite_audit(files, hit: DataHit, gone_rows, names, out: Path, changed, removed) -> None:
    """The audit without the entries naming a removed image, its kept counts less the removed images."""
    if AUDIT not in files.listing:
        return
    from foundry.vision.table import ImageAudit

    audit = ImageAudit.model_validate_json(files.path(AUDIT).read_bytes())
    marked = {e for f in hit.files if f.file == AUDIT for e in f.entries}
    names = {n for n in set(names) | {r["source"] for r in gone_rows} if n}
    entries = 0
    for reason, dropped in sorted(audit.dropped.items()):
        named = list(enumerate(dropped.named, 1))
        dropped.named = [e for k, e in named if f"{reason} entry {k}" not in marked and not _mentions(e, names)]
        entries += len(named) - len(dropped.named)
    audit.images_out -= len(gone_rows)
    for row in gone_rows:
        audit.splits[row["split"]] = audit.splits.get(row["split"], 0) - 1
        audit.labels[row["label"]] = audit.labels.get(row["label"], 0) - 1
    audit.labels = {label: n for label, n in audit.labels.items() if n > 0}  # as prepare counts: kept labels only
    removed["audit entries"] = entries
    audit.write(out)
    changed.add(AUDIT)


def _mentions(entry: str, names: set[str]) -> bool:
    return any(names_in(entry, name) for name in names)


def _manifest(old: DatasetManifest, shards, removed, ledger, changed, dropped, out: Path) -> None:
    stats = dict(old.stats)
    for key, n in (("images_out", removed["images"]), *((f"{s}_images", removed[f"{s} images"]) for s in SPLITS)):
        if key in stats:
            stats[key] -= n
    stats["purged"] = stats.get("purged", 0) + removed["images"]
    update = {"stats": stats, "image_counts": shards.counts}
    if old.ledger is not None and ledger is not None:
        update["ledger"] = old.ledger.model_copy(update={"documents": ledger})
    if old.files is not None:
        files = {n: d for n, d in old.files.items() if n not in dropped}
        update["files"] = {**files, **{n: fast_digest(out / n) for n in sorted(changed)}}
    DatasetManifest.model_validate(old.model_copy(update=update).model_dump()).write(out)


def _csv_bytes(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode("utf-8")
