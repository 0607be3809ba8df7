"""Stage A's gate for an image dataset: Great Expectations suites over the image table, the classes, the shards
and the split ledger, run as the text gate runs its own (`foundry.data.validate_gx.run_suites`), with the same report.

Blocks the run (`ValidationFailed`) when an image is not the configured size or colour, when fewer than two
classes are left, when a class has fewer than `image.min_per_class` images or more than `image.max_class_share`
of them, when a shard differs from its digest or count, when a split is empty, or when the sticky split moved.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pandas as pd

from foundry.config import FoundryConfig
from foundry.core.digests import sha256_file
from foundry.core.preparing import Validating
from foundry.data.manifest import DatasetManifest
from foundry.data.validate_gx import ValidationFailed, drop_docs_assets, lineage_suite, lineage_table, run_suites
from foundry.data.validation_report import ValidationReport

CHANNELS = {"gray": [1], "rgb": [3], "auto": [1, 3]}


def image_table(data_dir: Path) -> pd.DataFrame:
    """`images.csv`, one row per kept image."""
    return pd.read_csv(data_dir / "images.csv", dtype={"label": str, "sha256": str, "split": str, "path": str})


def class_table(manifest: DatasetManifest, images: pd.DataFrame) -> pd.DataFrame:
    """One row per class of the manifest: its images in both splits and its share of all."""
    counts = images["label"].value_counts()
    total = max(len(images), 1)
    return pd.DataFrame(
        [
            {"label": label, "images": int(counts.get(label, 0)), "share": counts.get(label, 0) / total}
            for label in manifest.classes
        ],
        columns=["label", "images", "share"],
    )


def _members(path: Path) -> int:
    with tarfile.open(path) as tar:
        return sum(1 for member in tar if member.name.endswith(".png"))


def shard_table(data_dir: Path) -> pd.DataFrame:
    """One row per shard of `shards.json`: its count and digest beside what the file holds."""
    from foundry.vision.shards import ShardManifest

    shards = ShardManifest.read(data_dir)
    rows = [
        {
            "file": s.file,
            "split": s.split,
            "manifest_images": s.images,
            "file_images": _members(data_dir / s.file),
            "sha256_matches": sha256_file(data_dir / s.file) == s.sha256,
        }
        for s in shards.shards
    ]
    return pd.DataFrame(rows, columns=["file", "split", "manifest_images", "file_images", "sha256_matches"])


def _suites(config: FoundryConfig) -> dict[str, list]:
    import great_expectations.expectations as gxe

    image = config.image
    images = [
        gxe.ExpectTableRowCountToBeBetween(min_value=1),
        gxe.ExpectColumnValuesToBeUnique(column="sha256"),  # also proves train and holdout disjoint
        gxe.ExpectColumnValuesToNotBeNull(column="label"),
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "holdout"]),
        gxe.ExpectColumnValuesToBeBetween(column="width", min_value=image.size, max_value=image.size),
        gxe.ExpectColumnValuesToBeBetween(column="height", min_value=image.size, max_value=image.size),
        gxe.ExpectColumnValuesToBeInSet(column="channels", value_set=CHANNELS[image.channels]),
        gxe.ExpectColumnUniqueValueCountToBeBetween(column="channels", max_value=1),  # one shape for the model
        gxe.ExpectColumnDistinctValuesToContainSet(column="split", value_set=["train", "holdout"]),
    ]
    classes = [
        gxe.ExpectTableRowCountToBeBetween(min_value=2),  # a classifier needs two labels at least
        gxe.ExpectColumnValuesToBeBetween(column="images", min_value=image.min_per_class),
        gxe.ExpectColumnValuesToBeBetween(column="share", max_value=image.max_class_share),
    ]
    shards = [
        gxe.ExpectTableRowCountToBeBetween(min_value=2),  # one train and one holdout shard at least
        gxe.ExpectColumnPairValuesToBeEqual(column_A="manifest_images", column_B="file_images"),
        gxe.ExpectColumnValuesToBeInSet(column="sha256_matches", value_set=[True]),
        gxe.ExpectColumnDistinctValuesToContainSet(column="split", value_set=["train", "holdout"]),
    ]
    return {"images": images, "classes": classes, "shards": shards}


def validate_image_dataset(job: Validating) -> ValidationReport:
    """`foundry.data.validate.validate_dataset` for a dataset of modality image (it calls this one)."""
    from foundry.vision.neardup import hash_words

    data_dir, config = job.data_dir, job.config
    manifest = DatasetManifest.read(data_dir)
    images = image_table(data_dir)
    tables = {"images": images, "classes": class_table(manifest, images), "shards": shard_table(data_dir)}
    tables["lineage"] = lineage_table(data_dir, images, job.parent, hash_words(config.image.hash_size))
    report = ValidationReport.of(run_suites(tables, {**_suites(config), "lineage": lineage_suite()}))
    report.write(job.report_path)
    if not report.success and job.docs_dir is not None:  # again, through checkpoints that write docs (new suites:
        run_suites(tables, {**_suites(config), "lineage": lineage_suite()}, job.docs_dir)  # GX's belong to one)
        drop_docs_assets(job.docs_dir)
    if not report.success:
        raise ValidationFailed(report.failure_message("data"), report)
    return report
