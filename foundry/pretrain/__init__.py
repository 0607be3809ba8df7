"""Text pretraining as a workload: documents as token shards, a GPT trained on them (`workload`), with the GPT's
arguments, the token loaders and the blocks FSDP wraps (`training`)."""
