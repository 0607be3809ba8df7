"""Text pretraining as a workload: documents as token shards, a GPT trained on them (`workload`).

- `training`: the GPT's arguments, the token loaders and the blocks FSDP wraps
- `validation`: stage E, the holdout metrics beside the compressors, generations and the loss curve
- `scoring`: `foundry evaluate` on documents (bits per byte, overall and per group); `report`: its comparison
- `group_baselines`: the baselines per group of source files
- `fields`: what text adds to the shared models: its datasets' token fields, a language model's scores
"""
