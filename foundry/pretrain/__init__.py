"""Text pretraining as a workload: documents as token shards, a GPT trained on them (`workload`)."""
