"""Text pretraining as a workload: documents as token shards, a GPT trained on them (`workload`).

Its data stage (stage A, documents in, a prepared folder out; the sources, ledger, audit, privacy and versioning it
builds on are shared, in `foundry.data`):
- `prepare`: source manifest in, a self-describing dataset directory out
- `clean`: decode, normalise, scrub, filter, de-duplicate and split documents, streaming
- `dedup`: exact de-duplication by content hash, near by MinHash LSH
- `shards`: the byte-level BPE trained on the train split, and the token shards
- `validate_documents`: stage A's gate for documents: GX suites over the documents, the shards and the splits

Training, validation and scoring:
- `training`: the GPT's arguments, the token loaders and the blocks FSDP wraps
- `parent_weights`: a parent's weights as a run's start, refused when its GPT settings differ
- `validation`: stage E, the holdout metrics beside the compressors, generations and the loss curve
- `holdout_metrics`: holdout loss, perplexity and bits per byte, the unigram baseline, and the gates' score
- `compressors`: gzip, xz, and the strongest general compressors (xz -9e, PPMd order 16, zpaq -m4 and -m5) given
  the training text
- `scoring`: `foundry evaluate` on documents (bits per byte, overall and per group); `report`: its comparison
- `group_baselines`: the baselines per group of source files
- `fields`: what text adds to the shared models: its datasets' token fields, a language model's scores
"""
