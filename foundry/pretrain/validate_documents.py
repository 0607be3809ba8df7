"""Stage A, the text gate: Great Expectations suites over the documents, the token shards and the splits.

`validate_documents` is the pretraining workload's `validate`; `foundry.data.validate.validate_dataset` calls it for
a folder of documents. A failure raises `ValidationFailed` naming each failed expectation with what was observed,
before anything is versioned or any compute is spent on training.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from foundry.config import FoundryConfig
from foundry.core.digests import sha256_file
from foundry.core.preparing import Validating
from foundry.core.process_pool import cores, process_map, worker_count
from foundry.data.manifest import DatasetManifest
from foundry.data.privacy import pii, secret_scan
from foundry.data.validate_gx import ValidationFailed, drop_docs_assets, lineage_suite, lineage_table, run_suites
from foundry.data.validation_report import PiiCounts, ValidationReport
from foundry.pretrain.clean import line_ranges, read_chunk

log = logging.getLogger(__name__)


def shard_table(data_dir: Path, manifest: DatasetManifest) -> pd.DataFrame:
    """One row per shard: what the manifest claims beside what the file holds."""
    rows = []
    for shard in manifest.shards or []:
        path = data_dir / shard.file
        dtype = np.dtype(shard.dtype).newbyteorder("<")
        size = path.stat().st_size
        # A truncated shard may end mid-token: count whole tokens and let the suite report the mismatch.
        whole = size // dtype.itemsize
        tokens = np.memmap(path, dtype=dtype, mode="r", shape=(whole,)) if whole else np.array([0])
        rows.append(
            {
                "file": shard.file,
                "split": shard.split,
                "manifest_tokens": shard.tokens,
                "file_tokens": whole if size % dtype.itemsize == 0 else -1,
                "max_token_id": int(tokens.max()),
                "min_token_id": int(tokens.min()),
                "end_of_text": int(np.count_nonzero(tokens == manifest.eot_id)) if whole else 0,
                "sha256_matches": sha256_file(path) == shard.sha256,
            }
        )
    return pd.DataFrame(rows)


def document_table(data_dir: Path, allowed: list[str] = (), workers: int = 1) -> pd.DataFrame:
    """`documents.csv` beside what the split files really hold: is each listed document there, and which
    kinds of personal data or secrets every detector finds in it (kinds only, never the data), whatever
    `data.pii` scrubbed: `pii_found` those not `allowed`, which fail the gate; `pii_allowed` the rest. The split
    files are searched in pieces on `workers` processes (the same table for any number)."""
    table = pd.read_csv(data_dir / "documents.csv", dtype={"sha256": str, "split": str, "source": str})
    splits = [data_dir / f"{split}.jsonl" for split in ("train", "holdout")]
    piece_bytes = max(1 << 20, sum(path.stat().st_size for path in splits) // (SCAN_PIECES_PER_WORKER * workers))
    pieces = [
        ScanPiece(str(path), start, end)
        for path in splits
        for start, end in line_ranges(path, -(-path.stat().st_size // piece_bytes))
    ]
    present, found = set(), {}
    with process_map(min(workers, len(pieces))) as mapper:
        for shas, kinds_of in mapper(scan_piece, pieces):
            present.update(shas)
            found.update(kinds_of)
    table["in_split_file"] = table["sha256"].isin(present)
    table["pii_found"] = [",".join(k for k in found.get(sha, []) if k not in allowed) for sha in table["sha256"]]
    table["pii_allowed"] = [",".join(k for k in found.get(sha, []) if k in allowed) for sha in table["sha256"]]
    return table


# Pieces a worker: equal byte ranges are not equal work (secrets and long lines cost more), so more pieces than
# workers keep both busy to the end.
SCAN_PIECES_PER_WORKER = 4


@dataclass(frozen=True)
class ScanPiece:
    """Bytes [start, end) of a split file, whole lines."""

    path: str
    start: int
    end: int


def scan_piece(piece: ScanPiece) -> tuple[list[str], dict[str, list[str]]]:
    """Map step of the gate: the sha256 of each document in the piece, and the kinds every detector finds in
    those that hold any."""
    shas, found = [], {}
    for text in read_chunk(Path(piece.path), piece.start, piece.end):
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        shas.append(sha)
        kinds = sorted({span.kind for span in pii.find(text)} | secret_scan.kinds(text))  # two opinions
        if kinds:
            found[sha] = kinds
    return shas, found


def pii_summary(documents: pd.DataFrame) -> PiiCounts:
    """Documents by kind, found and allowed: in the report even when the gate passes."""
    return PiiCounts(
        **{
            column.removeprefix("pii_"): dict(Counter(k for cell in documents[column] for k in cell.split(",") if k))
            for column in ("pii_found", "pii_allowed")
        }
    )


def split_table(
    manifest: DatasetManifest,
    documents: pd.DataFrame,
    shards: pd.DataFrame,
    min_holdout_tokens: int,
    fraction: float,
    tolerance: float,
) -> pd.DataFrame:
    """The split's sizes beside what the config asks: the split guarantees `fraction` of the bytes; tokens
    follow bytes closely but not exactly, hence the tolerance. And each split's document boundaries (end-of-text
    tokens in its shards) beside its documents: one each, none a document's text could forge."""
    tokens = manifest.train_tokens + manifest.holdout_tokens
    by_split = documents.groupby("split")["sha256"].apply(set)
    listed = documents["split"].value_counts()
    boundaries = shards.groupby("split")["end_of_text"].sum() if len(shards) else pd.Series(dtype=int)
    counts = {
        f"{split}_{what}": int(table.get(split, 0))
        for split in ("train", "holdout")
        for what, table in (("documents", listed), ("boundaries", boundaries))
    }
    shared = len(by_split.get("train", set()) & by_split.get("holdout", set()))
    train_bytes, holdout_bytes = manifest.count("train_bytes"), manifest.holdout_bytes
    return pd.DataFrame(
        [
            {
                "train_tokens": manifest.train_tokens,
                "holdout_tokens": manifest.holdout_tokens,
                "min_holdout_tokens": min_holdout_tokens,
                "holdout_token_share": manifest.holdout_tokens / max(tokens, 1),
                "min_holdout_token_share": fraction * (1 - tolerance),
                "holdout_bytes": holdout_bytes,
                "min_holdout_bytes": math.ceil(fraction * (train_bytes + holdout_bytes)),
                "documents_in_both_splits": shared,
                **counts,
            }
        ]
    )


def _suites(config: FoundryConfig, manifest: DatasetManifest):
    import great_expectations.expectations as gxe

    data = config.data
    documents = [
        gxe.ExpectTableRowCountToBeBetween(min_value=1),
        gxe.ExpectColumnValuesToNotBeNull(column="sha256"),
        gxe.ExpectColumnValuesToBeUnique(column="sha256"),  # also proves train and holdout disjoint
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "holdout"]),
        gxe.ExpectColumnValuesToBeBetween(column="chars", min_value=data.min_chars, max_value=data.max_chars),
        gxe.ExpectColumnValuesToBeInSet(column="in_split_file", value_set=[True]),
        gxe.ExpectColumnValuesToBeInSet(column="pii_found", value_set=[""]),  # no personal data left
    ]
    shards = [
        gxe.ExpectTableRowCountToBeBetween(min_value=2),
        gxe.ExpectColumnPairValuesToBeEqual(column_A="manifest_tokens", column_B="file_tokens"),
        gxe.ExpectColumnValuesToBeInSet(column="sha256_matches", value_set=[True]),
        gxe.ExpectColumnMaxToBeBetween(column="max_token_id", max_value=manifest.vocab_size - 1),
        gxe.ExpectColumnMinToBeBetween(column="min_token_id", min_value=0),
        gxe.ExpectColumnDistinctValuesToContainSet(column="split", value_set=["train", "holdout"]),
    ]
    splits = [
        # Evaluation needs at least one full window of holdout tokens.
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="holdout_tokens", column_B="min_holdout_tokens", or_equal=True
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="holdout_bytes", column_B="min_holdout_bytes", or_equal=True
        ),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="holdout_token_share", column_B="min_holdout_token_share", or_equal=True
        ),
        gxe.ExpectColumnValuesToBeInSet(column="documents_in_both_splits", value_set=[0]),
        gxe.ExpectColumnPairValuesToBeEqual(column_A="train_boundaries", column_B="train_documents"),
        gxe.ExpectColumnPairValuesToBeEqual(column_A="holdout_boundaries", column_B="holdout_documents"),
    ]
    return {"documents": documents, "shards": shards, "splits": splits}


def validate_documents(job: Validating) -> ValidationReport:
    """`validate_dataset` for documents prepared for pretraining (token shards)."""
    data_dir, config = job.data_dir, job.config
    manifest = DatasetManifest.read(data_dir)
    # On this machine's cores whatever `data.scheduler` says: the split files are here.
    workers = min(worker_count(config.data.workers), cores())
    documents = document_table(data_dir, config.data.pii_allowed, workers)
    shards = shard_table(data_dir, manifest)
    tables = {
        "documents": documents,
        "shards": shards,
        "splits": split_table(
            manifest,
            documents,
            shards,
            config.model.block_size + 2,
            config.data.holdout_fraction,
            config.data.holdout_tolerance,
        ),
    }
    tables["lineage"] = lineage_table(data_dir, documents, job.parent, config.data.near_dup_num_perm)
    suites = run_suites(tables, {**_suites(config, manifest), "lineage": lineage_suite()})
    report = ValidationReport.of(suites, pii_summary(documents))
    report.write(job.report_path)
    if report.pii.allowed:
        log.warning("personal data allowed through by data.pii_allowed: %s documents", report.pii.allowed)
    if not report.success and job.docs_dir is not None:  # again, through checkpoints that write docs
        run_suites(tables, {**_suites(config, manifest), "lineage": lineage_suite()}, job.docs_dir)
        drop_docs_assets(job.docs_dir)
    if not report.success:
        raise ValidationFailed(report.failure_message("data"), report)
    return report
