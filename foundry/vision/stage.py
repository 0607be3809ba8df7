"""The image data stage as the pipeline runs it: acquire (a SourceManifest of the labelled images) and prepare
(staged images, then WebDataset shards and the dataset's `manifest.json`), for `tasks.data` when
`data.modality` is image. Validation is `foundry.vision.validate_images`; versioning and hydration are text's.

The prepared folder (flat, as DVC versions it): `manifest.json` (DatasetManifest, modality image), `images.csv`,
`audit.json`, `ledger.csv`, `ledger_minhash.npy`, `shards.json` and `{train,holdout}-NNNNN.tar`; the staged
PNGs are in the shards, so `images/` is dropped.

    manifest = acquire_images(config, run_dir / "source_manifest.json")
    prepared = prepare_image_dataset(Preparing(manifest, config, run_dir / "prepared", DataBasis(champion_data_dir)))
"""

from __future__ import annotations

import logging
import os
from pathlib import Path, PurePosixPath

from foundry.config import FoundryConfig
from foundry.core.contracts import SourceFile, SourceManifest
from foundry.core.digests import folder_digests, sha256_file
from foundry.core.fs import remove_tree
from foundry.core.preparing import Preparing
from foundry.data.acquire import listed_sources
from foundry.data.manifest import FILE as MANIFEST_FILE
from foundry.data.manifest import DatasetManifest, LedgerRecord
from foundry.data.prepared import Prepared
from foundry.data.remote import SourceError
from foundry.vision.acquire import Listing, listing
from foundry.vision.prepare import StagedImages, prepare_images, source_content
from foundry.vision.shards import FILE as SHARDS_FILE
from foundry.vision.shards import ShardManifest, records_of, write_shards
from foundry.vision.table import ImageAudit, merged_classes

log = logging.getLogger(__name__)


def _entries(found: Listing) -> tuple[list[SourceFile], str]:
    """Each image fingerprinted, and the digest of (name, label, size, sha256): a relabelled image (an index
    row changed) is another source, as a changed file is."""
    entries = [
        SourceFile(path=one.path, name=one.name, size=os.stat(one.path).st_size, sha256=sha256_file(Path(one.path)))
        for one in found.images
    ]
    return entries, source_content(found.images, [e.size for e in entries], [e.sha256 for e in entries])


def _source_manifest(config: FoundryConfig, found: Listing) -> SourceManifest:
    entries, digest = _entries(found)
    skipped = {reason: len(names) for reason, names in sorted(found.skipped.items())}
    return listed_sources(config.data, entries, digest, skipped)


def acquire_images(config: FoundryConfig, manifest_path: Path) -> SourceManifest:
    """List and fingerprint every labelled image of the sources; write the manifest (`prepare`'s dependency)."""
    with listing(config.data, config.image) as found:
        manifest = _source_manifest(config, found)
    manifest.write(manifest_path)
    log.info("acquired %d images (%.1f MB) from %s", manifest.files, manifest.bytes / 1e6, manifest.source)
    return manifest


def _classes(rows, parent: Path | None) -> list[str]:
    """The parent's classes keep their indices (a warm start keeps its head's rows); new labels follow, sorted."""
    before = list(DatasetManifest.read(parent).classes) if parent is not None else []
    return merged_classes(before, (row.label for row in rows))


def _stats(audit: ImageAudit) -> dict[str, int]:
    stats = {"images_in": audit.images_in, "images_out": audit.images_out}
    stats.update({f"dropped_{reason}": entry.images for reason, entry in sorted(audit.dropped.items())})
    stats.update({f"stripped_{kind}": n for kind, n in sorted(audit.stripped.items())})
    stats.update({f"{split}_images": audit.splits.get(split, 0) for split in ("train", "holdout")})
    return stats


def image_manifest(
    source: SourceManifest, config: FoundryConfig, staged: StagedImages, shards: ShardManifest
) -> DatasetManifest:
    """The dataset's manifest; written last, as it lists every other file's digest."""
    return DatasetManifest(
        modality="image",
        kind="classification",
        source=source.source,
        source_digest=source.digest,
        source_skipped=source.skipped,
        stats=_stats(staged.audit),
        holdout_fraction=config.data.holdout_fraction,
        ledger=LedgerRecord(documents=len(staged.ledger), signing={"hash_size": config.image.hash_size}),
        classes=shards.classes,
        image_shape=shards.shape,
        image_counts=shards.counts,
        shard_manifest=SHARDS_FILE,
        files=folder_digests(staged.folder, skip=MANIFEST_FILE),
    )


def prepare_image_dataset(job: Preparing) -> Prepared:
    """Decode, de-duplicate and split the acquired images into `job.out_dir`, shard them and write the manifest.
    The job's basis: `parent` is the data version (folder) whose ledger and classes this one builds on; `purged` the
    pixel sha256s a purge removed, dropped should a source still hold them. The sources are listed again (their
    mirrors held while read) and fingerprinted as they are decoded, each file read once: they must still be what
    `acquire` fingerprinted. The PNGs go from prepare's spools into the shards, never a file each."""
    source, config, parent, replay_fraction = job.source, job.config, job.basis.parent, job.basis.replay_fraction
    if replay_fraction is not None and parent is None:
        raise ValueError("replaying old training images needs the parent data version they come from")
    with listing(config.data, config.image) as found:
        try:
            staged = prepare_images(
                found,
                config.data,
                config.image,
                job.out_dir,
                parent,
                replay_fraction,
                job.basis.purged,
                source_digest=source.digest,
                as_files=False,
            )
        except SourceError as exc:
            raise SourceError(f"{source.source!r}: {exc}") from None
    if not staged.rows:
        raise ValueError(f"no image of {source.source!r} left to prepare: dropped {staged.audit.dropped}")
    with staged.png_reader() as spool:
        shards = write_shards(
            records_of(staged.rows),  # relative paths, images/<sha[:2]>/<sha>.png: the PNG's place in the spools
            staged.folder,
            config.image.shard_images,
            _classes(staged.rows, parent),
            read=lambda path: spool.read(staged.pngs[PurePosixPath(path).stem]),
            shapes=[(row.channels, row.height, row.width) for row in staged.rows],
        )
    remove_tree(staged.folder / "images", within=staged.folder)  # the spools: the shards hold every PNG
    manifest = image_manifest(source, config, staged, shards)
    manifest.write(staged.folder)
    log.info(
        "prepared %d of %d images in %d classes: %s",
        staged.audit.images_out,
        staged.audit.images_in,
        len(shards.classes),
        staged.audit.splits,
    )
    return Prepared(manifest=manifest, lineage=staged.audit.lineage)
