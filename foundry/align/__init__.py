"""Alignment, one home: instruction tuning (SFT) and preference optimisation (DPO) of a registered model.

- `records`: chat and preference records as people write them, read and checked line by line
- `instructions`: the generated instruction set (`foundry instructions`)
- `prepare`: records in, a tokenized, packed, self-describing chat or preference dataset out
- `validate`: the alignment data gate, Great Expectations suites over the prepared records
- `start`: the version alignment starts from, with the chat template's markers, and the run's config
- `training`: the LightningModule and loaders for a chat or preference dataset, with pretraining replay
- `split_ledger`: the sticky split of chat and preference records, kept under the home
- `evaluation`: held-out conversations and preferences, scored beside the base
- `gate`: the alignment gate's I/O, the champion of its name scored on the same held-out data
- `scoring`: `foundry evaluate` on chat records (exact match, response loss); `fields`: its scores, as `ModelScores`
  takes them
- `workload`: the chat workload, as the trainer, the gates and evaluate ask it

The losses, the chat template and packing are pure PyTorch in the top-level `models` package (`models.align`,
`models.chat`, `models.align_data`, `models.lit_align`); the gate's rule is `foundry.gates.alignment`; the aligned
model's scores beside its base's, with their MLflow keys, are `foundry.core.metrics.aligned`.
"""
