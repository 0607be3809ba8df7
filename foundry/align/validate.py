"""Stage A for alignment data, the gate: Great Expectations suites over a prepared chat or preference dataset.

The records are read back from the split files and checked afresh (roles, an assistant turn, no empty
content, length within the context, no personal data left, no record in both splits), and the token
arrays against the manifest and the vocabulary. As for documents, a failure raises `ValidationFailed`
naming each failed expectation before anything is versioned or trained.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from foundry.align.records import FIELDS, context_tokens, load_field
from foundry.config import FoundryConfig
from foundry.data.manifest import DatasetManifest
from foundry.data.privacy import pii, secret_scan
from foundry.data.validate_gx import ValidationFailed, run_suites
from foundry.data.validation_report import ValidationReport
from models.chat import ROLES, ChatTemplate
from models.tokens import text_only


def _turns(record: dict) -> tuple[list[dict], list[str]]:
    """The record's messages (the prompt's, for a pair) and every reply it holds."""
    if "messages" in record:
        return record["messages"], [m["content"] for m in record["messages"] if m["role"] == "assistant"]
    return record["prompt"], [record["chosen"], record["rejected"]]


def _record_row(line: str, split: str, tokenizer, template: ChatTemplate, allowed: list[str]) -> dict:
    record = json.loads(line)
    messages, replies = _turns(record)
    contents = [m["content"] for m in messages] + ([] if "messages" in record else replies)
    try:
        fields = (
            {"tokens": template.encode(tokenizer, messages)[0]}
            if "messages" in record
            else {
                "prompt": template.encode_prompt(tokenizer, messages),
                "chosen": template.encode_reply(tokenizer, record["chosen"]),
                "rejected": template.encode_reply(tokenizer, record["rejected"]),
            }
        )
        tokens = context_tokens(fields)
    except ValueError:  # a role or marker the template refuses
        tokens = -1
    return {
        "sha256": hashlib.sha256(line.rstrip("\n").encode("utf-8")).hexdigest(),
        "split": split,
        "roles_valid": all(m["role"] in ROLES for m in messages),
        "assistant_turns": len(replies),
        "empty_contents": sum(1 for c in contents if not c.strip()),
        "tokens": tokens,
        # Every detector, whatever `data.pii` scrubbed, as the pretraining gate: the scrubber's own and the
        # independent secret scanner (two opinions); `data.pii_allowed` lets kinds by.
        "pii_found": ",".join(sorted(_found(contents) - set(allowed))),
    }


def _found(contents: list[str]) -> set[str]:
    return {s.kind for c in contents for s in pii.find(c)} | {kind for c in contents for kind in secret_scan.kinds(c)}


def record_table(data_dir: Path, config: FoundryConfig) -> pd.DataFrame:
    from tokenizers import Tokenizer

    tokenizer, template = (
        text_only(Tokenizer.from_file(str(data_dir / "tokenizer.json"))),
        ChatTemplate(),
    )  # as prepared
    listed = set(pd.read_csv(data_dir / "records.csv", dtype={"sha256": str})["sha256"])
    rows = []
    for split in ("train", "holdout"):
        with open(data_dir / f"{split}.jsonl", encoding="utf-8") as f:
            rows += [
                _record_row(line, split, tokenizer, template, config.data.pii_allowed) for line in f if line.strip()
            ]
    table = pd.DataFrame(rows)
    table["listed"] = table["sha256"].isin(listed)
    return table


def array_table(data_dir: Path, manifest: DatasetManifest) -> pd.DataFrame:
    """One row per split and field: records in the arrays beside records in the split's file, and id bounds."""
    records = pd.read_csv(data_dir / "records.csv")["split"].value_counts()
    rows = []
    for split in ("train", "holdout"):
        for field in FIELDS[manifest.kind]:
            ragged = load_field(data_dir, split, field)
            values = ragged.values if len(ragged.values) else np.zeros(1, dtype=np.int32)
            rows.append(
                {
                    "array": f"{split}.{field}",
                    "records": len(ragged),
                    "records_listed": int(records.get(split, 0)),
                    "offsets_consistent": bool(
                        ragged.offsets[0] == 0
                        and ragged.offsets[-1] == len(ragged.values)
                        and np.all(np.diff(ragged.offsets) >= 0)
                    ),
                    "max_id": int(values.max()) if field != "trained" else 0,
                    "min_id": int(values.min()),
                }
            )
    return pd.DataFrame(rows)


def _suites(config: FoundryConfig, manifest: DatasetManifest):
    import great_expectations.expectations as gxe

    records = [
        gxe.ExpectTableRowCountToBeBetween(min_value=2),
        gxe.ExpectColumnValuesToBeUnique(column="sha256"),  # no duplicates; train and holdout disjoint
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "holdout"]),
        gxe.ExpectColumnDistinctValuesToContainSet(column="split", value_set=["train", "holdout"]),
        gxe.ExpectColumnValuesToBeInSet(column="roles_valid", value_set=[True]),
        gxe.ExpectColumnValuesToBeBetween(column="assistant_turns", min_value=1),
        gxe.ExpectColumnValuesToBeInSet(column="empty_contents", value_set=[0]),
        gxe.ExpectColumnValuesToBeBetween(column="tokens", min_value=2, max_value=config.model.block_size),
        gxe.ExpectColumnValuesToBeInSet(column="pii_found", value_set=[""]),
        gxe.ExpectColumnValuesToBeInSet(column="listed", value_set=[True]),
    ]
    arrays = [
        gxe.ExpectColumnPairValuesToBeEqual(column_A="records", column_B="records_listed"),
        gxe.ExpectColumnValuesToBeInSet(column="offsets_consistent", value_set=[True]),
        gxe.ExpectColumnMaxToBeBetween(column="max_id", max_value=manifest.vocab_size - 1),
        gxe.ExpectColumnMinToBeBetween(column="min_id", min_value=0),
    ]
    return {"records": records, "arrays": arrays}


def validate_aligned(
    data_dir: Path, config: FoundryConfig, report_path: Path, docs_dir: Path | None = None
) -> ValidationReport:
    """Run the alignment data's suites; writes the report, raises `ValidationFailed` on failure (with GX data
    docs in `docs_dir` when given)."""
    manifest = DatasetManifest.read(data_dir)
    tables = {"records": record_table(data_dir, config), "arrays": array_table(data_dir, manifest)}
    report = ValidationReport.of(run_suites(tables, _suites(config, manifest)))
    report.write(report_path)
    if report.success:
        return report
    if docs_dir is not None:
        run_suites(tables, _suites(config, manifest), docs_dir)
    raise ValidationFailed(report.failure_message("alignment data"), report)
