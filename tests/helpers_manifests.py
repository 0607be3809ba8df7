"""Prepared datasets' manifest.json as each writer wrote it: documents, chat records and images."""

from __future__ import annotations

SHARD = {"file": "train_000.bin", "split": "train", "dtype": "uint16", "tokens": 2, "sha256": ""}

# The key order and shapes `foundry.pretrain.prepare` and `prepare_align` wrote with json.dumps(..., indent=1).
DOCUMENTS = {
    "source": "/corpus",
    "source_digest": "ab" * 32,
    "source_skipped": {"binary": 1},
    "stats": {"docs_in": 3, "docs_out": 2, "train_docs": 1, "holdout_docs": 1, "train_bytes": 9, "holdout_bytes": 7},
    "holdout_fraction": 0.3,
    "ledger": {"documents": 2, "signing": {"num_perm": 64, "shingle_words": 5}},
    "vocab_size": 300,
    "eot_id": 0,
    "dtype": "uint16",
    "shards": [SHARD],
    "train_tokens": 2,
    "holdout_tokens": 0,
    "files": {"train_000.bin": "cd" * 16},
}
CHAT = {
    "kind": "chat",
    "method": "sft",
    "source": "/records",
    "source_digest": "ef" * 32,
    "source_skipped": {},
    "stats": {"records_in": 4, "records_out": 3, "train_records": 2, "holdout_records": 1},
    "holdout_fraction": 0.2,
    "block_size": 64,
    "vocab_size": 304,
    "eot_id": 0,
    "chat_template": {"system": "<|system|>", "user": "<|user|>", "content_prefix": "\n", "nothing": None},
    "train_tokens": 40,
    "holdout_tokens": 12,
    "files": {"train.jsonl": "01" * 16},
}


IMAGES = {
    "modality": "image",
    "kind": "classification",
    "source": "sklearn://digits",
    "source_digest": "12" * 32,
    "source_skipped": {},
    "stats": {"images_in": 3, "images_out": 3, "train_images": 2, "holdout_images": 1},
    "holdout_fraction": 0.3,
    "ledger": {"documents": 3, "signing": {"hash_size": 16}},
    "classes": ["0", "1"],
    "image_shape": [1, 8, 8],
    "image_counts": {"train": {"0": 1, "1": 1}, "holdout": {"1": 1}},
    "shard_manifest": "shards.json",
    "files": {"shards.json": "34" * 16},
}
