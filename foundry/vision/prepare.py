"""Prepare for images: labelled images in, a staged folder out (metadata-free PNGs, the table, the audit, the ledger).

The staged folder holds `images/<sha[:2]>/<sha>.png` (pixels after the size policy, no metadata; or, for the
pipeline, which shards them at once, the PNGs in spool files there: `StagedImages.pngs`),
`images.csv` (`foundry.vision.table.ImageRow`), `audit.json` and the sticky-split ledger of
`foundry.data.ledger` (`ledger.csv`, and the dHash of each image as `ledger_minhash.npy`'s signature row),
keyed by the pixels' sha256 as text is by the document's. The split is `holdout_set` over image counts.

    with listing(cfg.data, image_cfg) as found:
        staged = prepare_images(found, cfg.data, image_cfg, out_dir, parent=previous_staged_folder)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from foundry.config import DataConfig
from foundry.core.fs import remove_tree
from foundry.data.acquire import content_digest
from foundry.data.ledger import Ledger, Lineage, holdout_set, identity
from foundry.data.remote import SourceError
from foundry.vision.acquire import LabelledImage, Listing
from foundry.vision.config import ImageConfig
from foundry.vision.dedup import Candidate, Deduplicator
from foundry.vision.neardup import hash_words, words_of
from foundry.vision.readpool import PngRef, Read, SpoolReader, read_images
from foundry.vision.table import Dropped, ImageAudit, ImageRow, write_table

log = logging.getLogger(__name__)


class LedgerWidthMismatch(ValueError):
    """The parent's ledger holds hashes of another size than image.hash_size."""


@dataclass(frozen=True)
class StagedImages:
    folder: Path
    rows: list[ImageRow]
    audit: ImageAudit
    ledger: Ledger
    pngs: dict[str, PngRef]  # sha256 -> its PNG in the spools of `folder / "images"`; empty when staged as files

    def png_reader(self) -> SpoolReader:
        return SpoolReader(self.folder / "images")


@dataclass(frozen=True, slots=True)
class _Met:
    image: LabelledImage
    read: Read


def source_content(images: list[LabelledImage], sizes: list[int], shas: list[str]) -> str:
    """The digest of what identifies the images read (`foundry.data.acquire.content_digest` of each one's name,
    label, size and sha256): a relabelled image is another source, as a changed file is."""
    content = [
        {"name": one.name, "label": one.label, "size": size, "sha256": sha}
        for one, size, sha in zip(images, sizes, shas, strict=True)
    ]
    return content_digest(content)


def read_lineage(parent: Path, image: ImageConfig, replay_fraction: float | None = None) -> Lineage:
    """The parent staged folder's ledger, checked to be signed with this config's hash size."""
    words = hash_words(image.hash_size)
    ledger = Ledger.read(parent, words)
    if ledger.signatures is not None and len(ledger) and ledger.signatures.shape[1] != words:
        raise LedgerWidthMismatch(
            f"{parent}: the ledger's hashes are {ledger.signatures.shape[1] * 32} bits, image.hash_size "
            f"{image.hash_size} makes {image.hash_size**2}: keep image.hash_size for a data version's descendants"
        )
    return Lineage(ledger, replay_fraction, salt=identity(parent))


def _decode_all(
    found: Listing,
    data: DataConfig,
    image: ImageConfig,
    audit: ImageAudit,
    staged: Path,
    purged=frozenset(),
    source_digest: str | None = None,
) -> list[_Met]:
    """Every image read once (`foundry.vision.readpool`), its PNG spooled under `staged/images`; then, in the
    listing's order, the checks: the sources still the ones acquired (`source_digest`), each image readable."""
    reads = read_images([one.path for one in found.images], image, data.max_file_bytes, purged, staged / "images")
    if source_digest is not None:
        digest = source_content(found.images, [r.size for r in reads], [r.source_sha256 for r in reads])
        if digest != source_digest:
            raise SourceError(
                f"the images changed since they were acquired (digest {digest[:12]}, acquired {source_digest[:12]}): "
                "run again, so that acquire and prepare read the same images"
            )
    met = []
    for entry, read in zip(found.images, reads):
        if read.error:
            if data.on_error == "fail":
                raise SourceError(f"cannot decode {entry.name}: {read.error}") from None
            audit.drop("undecodable", entry.name, read.error)
            log.warning("dropped an image that is not readable (named in audit.json)")
            continue
        if read.purged:  # its name may be what a person asked to have forgotten: a count only
            audit.dropped.setdefault("purged", Dropped()).images += 1
            continue
        for kind in read.metadata:
            audit.stripped[kind] = audit.stripped.get(kind, 0) + 1
        met.append(_Met(entry, read))
    return met


def _image_path(sha: str) -> str:
    return f"images/{sha[:2]}/{sha}.png"


def _split_of(sha: str, holdout: set[str], lineage: Lineage | None) -> str | None:
    """As for text: None for an old training image a retrain does not replay."""
    if sha in holdout:
        return "holdout"
    if lineage is not None and sha in lineage.ledger.split_of and not lineage.replayed(sha):
        return None
    return "train"


def _select(met: list[_Met], image: ImageConfig, audit: ImageAudit, lineage: Lineage | None) -> list[_Met]:
    dedup = Deduplicator(image.hash_size**2, image.near_dup_distance)
    if lineage is not None:
        dedup.seed(lineage.ledger)
    first: dict[str, _Met] = {}
    for one in met:
        candidate = Candidate(one.read.sha256, one.read.bits, one.image.label, one.image.name)
        reason, detail = dedup.check(candidate)
        if reason:
            audit.drop(reason, one.image.name, detail)
        else:
            first[one.read.sha256] = one
    for _, name, other in dedup.conflicted():
        audit.drop("label_conflict", name, f"also under another label as {other}")
    return [first[sha] for sha in dedup.survivors()]


def prepare_images(
    found: Listing,
    data: DataConfig,
    image: ImageConfig,
    out_dir: Path,
    parent: Path | None = None,
    replay_fraction: float | None = None,
    purged: frozenset[str] = frozenset(),
    source_digest: str | None = None,
    as_files: bool = True,
) -> StagedImages:
    """Decode, strip, fit, de-duplicate and split `found`'s images into `out_dir` (replaced whole).

    `parent` is an earlier staged folder whose ledger this one builds on: its images keep their split.
    `purged`: pixel sha256s a purge removed (`foundry.data.purged`), dropped as "purged", counted, never named.
    `source_digest`: what acquire fingerprinted (`source_content`); the images read must still be those.
    `as_files`: each kept image a PNG file in `images/`; else left in the spools there, for the shards only."""
    lineage = read_lineage(parent, image, replay_fraction) if parent is not None else None
    audit = ImageAudit(images_in=len(found.images) + sum(len(names) for names in found.skipped.values()))
    for reason, names in found.skipped.items():
        for name in names:
            audit.drop(reason, name)
    out_dir = out_dir.resolve()
    work = out_dir.with_name(f".{out_dir.name}.staging")
    remove_tree(work, within=out_dir.parent, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        met = _decode_all(found, data, image, audit, work, purged, source_digest)
        kept = _select(met, image, audit, lineage)
        rows, ledger = _split(kept, data, audit, lineage, hash_words(image.hash_size))
        pngs = {one.read.sha256: one.read.png for one in kept}
        pngs = {row.sha256: pngs[row.sha256] for row in rows}
        if as_files:
            _unspool(work, rows, pngs)
            pngs = {}
        write_table(rows, work)
        ledger.write(work)
        audit.write(work)
    except BaseException:
        remove_tree(work, within=out_dir.parent, ignore_errors=True)
        raise
    remove_tree(out_dir, within=out_dir.parent, ignore_errors=True)
    work.rename(out_dir)
    log.info("images: kept %d of %d; %s", audit.images_out, audit.images_in, audit.splits)
    return StagedImages(out_dir, rows, audit, ledger, pngs)


def _split(
    kept: list[_Met], data: DataConfig, audit: ImageAudit, lineage: Lineage | None, words: int
) -> tuple[list[ImageRow], Ledger]:
    sticky = lineage.ledger.split_of if lineage is not None else {}
    holdout = holdout_set([(one.read.sha256, 1) for one in kept], data.holdout_fraction, sticky)
    rows, new = [], []
    for one in kept:
        sha = one.read.sha256
        split = _split_of(sha, holdout, lineage)
        if sha not in sticky:
            # the packed dHash, not an array a row: 50,000 arrays were the peak of prepare's memory (~8 MB)
            new.append((sha, split or "train", one.image.name, one.read.dhash.ljust(4 * words, b"\0")))
        if split is None:
            continue
        height, width = one.read.shape[:2]
        rows.append(
            ImageRow(
                path=_image_path(sha),
                label=one.image.label,
                sha256=sha,
                width=width,
                height=height,
                channels=one.read.channels,
                split=split,
                source=one.image.name,
            )
        )
    audit.images_out = len(rows)
    for row in rows:
        audit.splits[row.split] = audit.splits.get(row.split, 0) + 1
        audit.labels[row.label] = audit.labels.get(row.label, 0) + 1
    audit.labels = dict(sorted(audit.labels.items()))
    if lineage is not None:
        audit.lineage = {"new_images": len(new), "ledger_images_present": len(kept) - len(new)}
    base = lineage.ledger if lineage is not None else Ledger(signatures=np.zeros((0, words), np.uint32))
    shas, splits, names, packed = (list(column) for column in zip(*new)) if new else ([], [], [], [])
    return rows, base.appended(shas, splits, names, words_of(b"".join(packed), words))


def _unspool(work: Path, rows: list[ImageRow], pngs: dict[str, PngRef]) -> None:
    """Each kept image's PNG from the spools to its own file; the spools removed."""
    spools = work / "images"
    with SpoolReader(spools) as spool:
        for row in rows:
            target = work / row.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(spool.read(pngs[row.sha256]))
    for path in spools.glob("spool-*.bin"):
        path.unlink()
