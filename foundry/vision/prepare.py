"""Prepare for images: labelled images in, a staged folder out (metadata-free PNGs, the table, the audit, the ledger).

The staged folder holds `images/<sha[:2]>/<sha>.png` (pixels after the size policy, no metadata),
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
from foundry.data.ledger import Ledger, Lineage, holdout_set, identity
from foundry.data.remote import SourceError
from foundry.vision.acquire import LabelledImage, Listing
from foundry.vision.config import ImageConfig
from foundry.vision.decode import Decoded, UndecodableImage, decode
from foundry.vision.dedup import Candidate, Deduplicator
from foundry.vision.neardup import dhash, hash_words, to_words
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


@dataclass(frozen=True)
class _Met:
    image: LabelledImage
    decoded: Decoded
    bits: np.ndarray


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
    found: Listing, data: DataConfig, image: ImageConfig, audit: ImageAudit, staged: Path, purged=frozenset()
) -> list[_Met]:
    met = []
    for entry in found.images:
        try:
            size = entry.path.stat().st_size
            if size > data.max_file_bytes:
                raise UndecodableImage(f"{size} bytes, more than data.max_file_bytes ({data.max_file_bytes})")
            decoded = decode(entry.path, image)
        except (UndecodableImage, OSError) as exc:
            if data.on_error == "fail":
                raise SourceError(f"cannot decode {entry.name}: {exc}") from None
            audit.drop("undecodable", entry.name, str(exc))
            log.warning("dropped an image that is not readable (named in audit.json): %s", type(exc).__name__)
            continue
        if decoded.sha256 in purged:  # its name may be what a person asked to have forgotten: a count only
            audit.dropped.setdefault("purged", Dropped()).images += 1
            continue
        for kind in decoded.metadata:
            audit.stripped[kind] = audit.stripped.get(kind, 0) + 1
        target = staged / _image_path(decoded.sha256)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(decoded.png())
        met.append(_Met(entry, decoded, dhash(decoded.image(), image.hash_size)))
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
        candidate = Candidate(one.decoded.sha256, one.bits, one.image.label, one.image.name)
        reason, detail = dedup.check(candidate)
        if reason:
            audit.drop(reason, one.image.name, detail)
        else:
            first[one.decoded.sha256] = one
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
) -> StagedImages:
    """Decode, strip, fit, de-duplicate and split `found`'s images into `out_dir` (replaced whole).

    `parent` is an earlier staged folder whose ledger this one builds on: its images keep their split.
    `purged`: pixel sha256s a purge removed (`foundry.data.purged`), dropped as "purged", counted, never named."""
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
        kept = _select(_decode_all(found, data, image, audit, work, purged), image, audit, lineage)
        rows, ledger = _split(kept, data, audit, lineage, hash_words(image.hash_size))
        _remove_unlisted(work, {row.path for row in rows})
        write_table(rows, work)
        ledger.write(work)
        audit.write(work)
    except BaseException:
        remove_tree(work, within=out_dir.parent, ignore_errors=True)
        raise
    remove_tree(out_dir, within=out_dir.parent, ignore_errors=True)
    work.rename(out_dir)
    log.info("images: kept %d of %d; %s", audit.images_out, audit.images_in, audit.splits)
    return StagedImages(out_dir, rows, audit, ledger)


def _split(
    kept: list[_Met], data: DataConfig, audit: ImageAudit, lineage: Lineage | None, words: int
) -> tuple[list[ImageRow], Ledger]:
    sticky = lineage.ledger.split_of if lineage is not None else {}
    holdout = holdout_set([(one.decoded.sha256, 1) for one in kept], data.holdout_fraction, sticky)
    rows, new = [], []
    for one in kept:
        sha = one.decoded.sha256
        split = _split_of(sha, holdout, lineage)
        if sha not in sticky:
            new.append((sha, split or "train", one.image.name, to_words(one.bits)))
        if split is None:
            continue
        height, width = one.decoded.pixels.shape[:2]
        rows.append(
            ImageRow(
                path=_image_path(sha),
                label=one.image.label,
                sha256=sha,
                width=width,
                height=height,
                channels=one.decoded.channels,
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
    return rows, base.extended(new, words)


def _remove_unlisted(work: Path, listed: set[str]) -> None:
    """PNGs of images decoded but then dropped (duplicates, conflicts, not replayed) leave the staged folder."""
    for path in sorted((work / "images").glob("*/*.png")):
        if path.relative_to(work).as_posix() not in listed:
            path.unlink()
