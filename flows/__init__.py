"""The Prefect flows, one module each: the table of contents of what Foundry does.

- `train_pipeline`: raw text to a registered, evaluated model
- `retrain`: fine-tune the champion on what is new, through the same gate
- `reproduce`: re-train a registered model from its lineage and compare
- `align`: instruction tuning (sft) or preference optimisation (dpo) of a registered version
- `deployments`: the deployments `foundry serve` and `prefect.yaml` offer

Each flow module sets up the environment when imported (a Prefect worker imports it directly).
"""
