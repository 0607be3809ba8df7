"""Stage A, the gate: Great Expectations suites over the documents and the shards.

A failure raises `ValidationFailed` naming each failed expectation with what was observed, before
anything is versioned or any compute is spent on training.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from foundry.config import FoundryConfig
from foundry.data import pii, secret_scan
from foundry.data.clean import iter_texts
from foundry.data.manifest import DatasetManifest
from foundry.data.validation_report import ExpectationResult, PiiCounts, SuiteResult, ValidationReport
from foundry.digests import sha256_file
from foundry.fs import remove_tree

log = logging.getLogger(__name__)
DOCS_SITE = "foundry"


class ValidationFailed(RuntimeError):
    """The prepared data broke at least one expectation."""

    def __init__(self, message: str, report: ValidationReport):
        super().__init__(message)
        self.report = report


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
                "sha256_matches": sha256_file(path) == shard.sha256,
            }
        )
    return pd.DataFrame(rows)


def document_table(data_dir: Path, allowed: list[str] = ()) -> pd.DataFrame:
    """`documents.csv` beside what the split files really hold: is each listed document there, and which
    kinds of personal data or secrets every detector finds in it (kinds only, never the data), whatever
    `data.pii` scrubbed: `pii_found` those not `allowed`, which fail the gate; `pii_allowed` the rest."""
    table = pd.read_csv(data_dir / "documents.csv", dtype={"sha256": str, "split": str, "source": str})
    present, found = set(), {}
    for split in ("train", "holdout"):
        for text in iter_texts(data_dir / f"{split}.jsonl"):
            sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
            present.add(sha)
            kinds = sorted({span.kind for span in pii.find(text)} | secret_scan.kinds(text))  # two opinions
            if kinds:
                found[sha] = kinds
    table["in_split_file"] = table["sha256"].isin(present)
    table["pii_found"] = [",".join(k for k in found.get(sha, []) if k not in allowed) for sha in table["sha256"]]
    table["pii_allowed"] = [",".join(k for k in found.get(sha, []) if k in allowed) for sha in table["sha256"]]
    return table


def pii_summary(documents: pd.DataFrame) -> PiiCounts:
    """Documents by kind, found and allowed: in the report even when the gate passes."""
    return PiiCounts(
        **{
            column.removeprefix("pii_"): dict(Counter(k for cell in documents[column] for k in cell.split(",") if k))
            for column in ("pii_found", "pii_allowed")
        }
    )


def split_table(
    manifest: DatasetManifest, documents: pd.DataFrame, min_holdout_tokens: int, fraction: float, tolerance: float
) -> pd.DataFrame:
    """The split's sizes beside what the config asks: the split guarantees `fraction` of the bytes; tokens
    follow bytes closely but not exactly, hence the tolerance."""
    tokens = manifest.train_tokens + manifest.holdout_tokens
    by_split = documents.groupby("split")["sha256"].apply(set)
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
    ]
    return {"documents": documents, "shards": shards, "splits": splits}


def _observed(result: dict) -> str:
    if "observed_value" in result:
        return f"observed {result['observed_value']!r}"
    if "unexpected_count" in result:
        examples = result.get("partial_unexpected_list", [])[:3]
        return f"{result['unexpected_count']} unexpected rows, e.g. {examples}"
    return "no observation"


def _context(docs_dir: Path | None):
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    if docs_dir is not None:  # the ephemeral context's own site lives in a throwaway folder
        context.add_data_docs_site(
            DOCS_SITE,
            {
                "class_name": "SiteBuilder",
                "show_how_to_buttons": False,
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
    return context


def _run(context, definition, table: pd.DataFrame, with_docs: bool):
    import great_expectations as gx

    if not with_docs:
        return definition.run(batch_parameters={"dataframe": table})
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(
            name=definition.name,
            validation_definitions=[definition],
            actions=[gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=[DOCS_SITE])],
        )
    )
    return next(iter(checkpoint.run(batch_parameters={"dataframe": table}).run_results.values()))


def run_suites(tables: dict[str, pd.DataFrame], suites: dict, docs_dir: Path | None = None) -> dict[str, SuiteResult]:
    """Validate each table against its suite: one result per expectation, by suite name.
    With `docs_dir`, the results also become GX data docs (HTML) there."""
    import great_expectations as gx

    context = _context(docs_dir)
    results = {}
    source = context.data_sources.add_pandas("foundry")
    for name, expectations in suites.items():
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(f"{name}_all")
        suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
        definition = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
        outcome = _run(context, definition, tables[name], docs_dir is not None)
        entries = [
            ExpectationResult(
                expectation=r.expectation_config.type,
                # As JSON has it (pairs become lists), so the report reads back equal.
                kwargs=json.loads(
                    json.dumps({k: v for k, v in r.expectation_config.kwargs.items() if k != "batch_id"}, default=str)
                ),
                success=bool(r.success),
                observed=_observed(r.result or {}),
            )
            for r in outcome.results
        ]
        results[name] = SuiteResult(success=bool(outcome.success), results=entries)
    return results


def _drop_docs_assets(docs_dir: Path) -> None:
    """Fonts and images are 4 MB of every site; the pages read fine without them."""
    for folder in ("fonts", "images"):
        remove_tree(docs_dir / "static" / folder, within=docs_dir, ignore_errors=True)


def validate_dataset(
    data_dir: Path, config: FoundryConfig, report_path: Path, docs_dir: Path | None = None, parent: Path | None = None
) -> ValidationReport:
    """Run the gate over a prepared directory; writes the report, raises `ValidationFailed` on failure.
    With `docs_dir`, a failure also leaves GX data docs (HTML, `index.html` first) there. With `parent`, the
    data version whose ledger this one was built on, the splits must be the ones its ledger gives."""
    manifest = DatasetManifest.read(data_dir)
    documents = document_table(data_dir, config.data.pii_allowed)
    tables = {
        "documents": documents,
        "shards": shard_table(data_dir, manifest),
        "splits": split_table(
            manifest,
            documents,
            config.model.block_size + 2,
            config.data.holdout_fraction,
            config.data.holdout_tolerance,
        ),
    }
    tables["lineage"] = lineage_table(data_dir, documents, parent, config.data.near_dup_num_perm)
    suites = run_suites(tables, {**_suites(config, manifest), "lineage": _lineage_suite()})
    report = ValidationReport.of(suites, pii_summary(documents))
    report.write(report_path)
    if report.pii.allowed:
        log.warning("personal data allowed through by data.pii_allowed: %s documents", report.pii.allowed)
    if not report.success and docs_dir is not None:  # again, through checkpoints that write docs
        run_suites(tables, {**_suites(config, manifest), "lineage": _lineage_suite()}, docs_dir)
        _drop_docs_assets(docs_dir)
    if not report.success:
        raise ValidationFailed(report.failure_message("data"), report)
    return report


def lineage_table(data_dir: Path, documents: pd.DataFrame, parent: Path | None, num_perm: int) -> pd.DataFrame:
    """One row per document the dataset, its ledger or its parent's ledger knows: the split the parent's ledger
    gave it ('new' when it did not list it), the split this version's ledger gives it ('unlisted' when it does
    not) and the split it is in now ('absent' when it is in neither split file)."""
    from foundry.data.ledger import Ledger

    ledger = Ledger.read(data_dir, num_perm).split_of
    before = Ledger.read(parent, num_perm).split_of if parent is not None else {}
    now = dict(zip(documents["sha256"], documents["split"]))
    shas = sorted(set(ledger) | set(before) | set(now))
    return pd.DataFrame(
        {
            "sha256": shas,
            "parent_split": [before.get(sha, "new") for sha in shas],
            "ledger_split": [ledger.get(sha, "unlisted") for sha in shas],
            "split": [now.get(sha, "absent") for sha in shas],
        }
    )


def _lineage_suite() -> list:
    """Sticky splits: the ledger lists every document with its split, keeps every assignment of the parent's,
    and no document the parent (or any ancestor: the ledger carries theirs) trained on is in the holdout."""
    import great_expectations.expectations as gxe

    kept = [("train", "train"), ("holdout", "holdout")]
    return [
        gxe.ExpectColumnPairValuesToBeInSet(
            column_A="ledger_split",
            column_B="split",
            value_pairs_set=[*kept, ("train", "absent"), ("holdout", "absent")],
        ),
        gxe.ExpectColumnPairValuesToBeInSet(
            column_A="parent_split",
            column_B="ledger_split",
            value_pairs_set=[*kept, ("new", "train"), ("new", "holdout")],
        ),
        gxe.ExpectColumnPairValuesToBeInSet(
            column_A="parent_split",
            column_B="split",
            value_pairs_set=[*kept, ("train", "absent"), ("holdout", "absent"), ("new", "train"), ("new", "holdout")],
        ),
    ]
