"""Stage A, prepare: source manifest in, a self-describing dataset directory out.

The directory (the `prepared` output of `dvc.yaml`) holds `train.jsonl`, `holdout.jsonl`,
`documents.csv`, `tokenizer.json`, the token shards and `manifest.json`.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from foundry.config import FoundryConfig
from tasks.clean import clean_documents
from tasks.shards import tokenize_dataset

log = logging.getLogger(__name__)


def prepare(source_manifest: dict, config: FoundryConfig, out_dir: Path, progress: bool = True) -> dict:
    """Clean, split and tokenize into a fresh `out_dir`; returns the dataset manifest."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    stats = clean_documents(source_manifest["entries"], config.data, out_dir, progress=progress)
    if stats.split_docs["train"] == 0:
        raise ValueError(
            f"no training documents left after cleaning {stats.docs_in} documents from {config.data.source!r}: "
            f"dropped {dict(stats.dropped)}; check the quality thresholds in the data section"
        )
    tokens = tokenize_dataset(out_dir, config.tokenizer, config.data.shard_tokens, stats.split_docs["train"])
    manifest = {
        "source": source_manifest["source"], "source_digest": source_manifest["digest"],
        "source_skipped": source_manifest["skipped"], "stats": stats.as_metrics(),
        "holdout_fraction": config.data.holdout_fraction, **tokens,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    log.info(
        "prepared %d of %d documents: %d train / %d holdout tokens",
        stats.docs_out, stats.docs_in, tokens["train_tokens"], tokens["holdout_tokens"],
    )
    return manifest


def prepare_metrics(manifest: dict) -> dict[str, float]:
    """The counts worth a chart in MLflow: documents in and out, drops by reason, tokens."""
    metrics = {f"data/{k}": v for k, v in manifest["stats"].items()}
    metrics.update({f"data/source_{k}": v for k, v in manifest["source_skipped"].items()})
    metrics["data/train_tokens"] = manifest["train_tokens"]
    metrics["data/holdout_tokens"] = manifest["holdout_tokens"]
    return metrics
