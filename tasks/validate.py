"""Stage A, the gate: Great Expectations suites over the documents and the shards.

A failure raises `ValidationFailed` naming each failed expectation with what was observed, before
anything is versioned or any compute is spent on training.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from foundry.config import FoundryConfig
from tasks.shards import _sha256


class ValidationFailed(RuntimeError):
    """The prepared data broke at least one expectation."""

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


def shard_table(data_dir: Path, manifest: dict) -> pd.DataFrame:
    """One row per shard: what the manifest claims beside what the file holds."""
    rows = []
    for shard in manifest["shards"]:
        path = data_dir / shard["file"]
        dtype = np.dtype(shard["dtype"]).newbyteorder("<")
        size = path.stat().st_size
        # A truncated shard may end mid-token: count whole tokens and let the suite report the mismatch.
        whole = size // dtype.itemsize
        tokens = np.memmap(path, dtype=dtype, mode="r", shape=(whole,)) if whole else np.array([0])
        rows.append({
            "file": shard["file"], "split": shard["split"], "manifest_tokens": shard["tokens"],
            "file_tokens": whole if size % dtype.itemsize == 0 else -1,
            "max_token_id": int(tokens.max()), "min_token_id": int(tokens.min()),
            "sha256_matches": _sha256(path) == shard["sha256"],
        })
    return pd.DataFrame(rows)


def split_table(manifest: dict, min_holdout_tokens: int) -> pd.DataFrame:
    return pd.DataFrame([{
        "train_tokens": manifest["train_tokens"], "holdout_tokens": manifest["holdout_tokens"],
        "min_holdout_tokens": min_holdout_tokens,
    }])


def _suites(config: FoundryConfig, manifest: dict):
    import great_expectations.expectations as gxe

    data = config.data
    documents = [
        gxe.ExpectTableRowCountToBeBetween(min_value=1),
        gxe.ExpectColumnValuesToNotBeNull(column="sha256"),
        gxe.ExpectColumnValuesToBeUnique(column="sha256"),  # also proves train and holdout disjoint
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "holdout"]),
        gxe.ExpectColumnValuesToBeBetween(column="chars", min_value=data.min_chars, max_value=data.max_chars),
    ]
    shards = [
        gxe.ExpectTableRowCountToBeBetween(min_value=2),
        gxe.ExpectColumnPairValuesToBeEqual(column_A="manifest_tokens", column_B="file_tokens"),
        gxe.ExpectColumnValuesToBeInSet(column="sha256_matches", value_set=[True]),
        gxe.ExpectColumnMaxToBeBetween(column="max_token_id", max_value=manifest["vocab_size"] - 1),
        gxe.ExpectColumnMinToBeBetween(column="min_token_id", min_value=0),
        gxe.ExpectColumnDistinctValuesToContainSet(column="split", value_set=["train", "holdout"]),
    ]
    # Evaluation needs at least one full window of holdout tokens.
    splits = [gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="holdout_tokens", column_B="min_holdout_tokens", or_equal=True)]
    return {"documents": documents, "shards": shards, "splits": splits}


def _observed(result: dict) -> str:
    if "observed_value" in result:
        return f"observed {result['observed_value']!r}"
    if "unexpected_count" in result:
        examples = result.get("partial_unexpected_list", [])[:3]
        return f"{result['unexpected_count']} unexpected rows, e.g. {examples}"
    return "no observation"


def run_suites(tables: dict[str, pd.DataFrame], suites: dict) -> dict:
    """Validate each table against its suite; a JSON-able report with one entry per expectation."""
    import great_expectations as gx

    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    report = {"success": True, "suites": {}}
    source = context.data_sources.add_pandas("foundry")
    for name, expectations in suites.items():
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(f"{name}_all")
        suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
        definition = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
        outcome = definition.run(batch_parameters={"dataframe": tables[name]})
        entries = []
        for r in outcome.results:
            entry = {
                "expectation": r.expectation_config.type, "kwargs": {k: v for k, v in r.expectation_config.kwargs.items() if k != "batch_id"},
                "success": bool(r.success), "observed": _observed(r.result or {}),
            }
            entries.append(entry)
        report["suites"][name] = {"success": bool(outcome.success), "results": entries}
        report["success"] &= bool(outcome.success)
    return report


def validate_dataset(data_dir: Path, config: FoundryConfig, report_path: Path) -> dict:
    """Run the gate over a prepared directory; writes the report, raises `ValidationFailed` on failure."""
    manifest = json.loads((data_dir / "manifest.json").read_text())
    tables = {
        "documents": pd.read_csv(data_dir / "documents.csv"),
        "shards": shard_table(data_dir, manifest),
        "splits": split_table(manifest, config.model.block_size + 2),
    }
    report = run_suites(tables, _suites(config, manifest))
    report_path.write_text(json.dumps(report, indent=1, default=str))
    if not report["success"]:
        failed = [
            f"{suite}: {e['expectation']}({', '.join(f'{k}={v}' for k, v in e['kwargs'].items())}) {e['observed']}"
            for suite, body in report["suites"].items() for e in body["results"] if not e["success"]
        ]
        raise ValidationFailed("data validation failed, nothing was versioned or trained:\n  " + "\n  ".join(failed), report)
    return report
