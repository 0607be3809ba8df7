"""The Prefect flows, one module each: the table of contents of what Foundry does.

- `train_pipeline`: raw text to a registered, evaluated model (`foundry run`)
- `retrain`: fine-tune the champion on what is new, through the same gate (`foundry retrain`)
- `reproduce`: re-train a registered model from its lineage (an aligned one with the replay it trained with) and
  compare (`foundry reproduce`)
- `search`: hyperparameter search, the data prepared once, trials on Dask (`foundry search`)
- `align`: instruction tuning (sft) or preference optimisation (dpo) of a registered version (`foundry align`)
- `finetune`: a domain specialist of a registered version (`foundry finetune`)
- `merge`: merging specialists by their parameters (`foundry merge`)
- `evaluate`: registered versions scored on data of one's choice, beside the baselines (`foundry evaluate`)
- `gc`: what nothing refers to any more, listed and deleted (`foundry gc`)
- `purge`: every copy of a person's documents removed, and what was trained on them retrained (`foundry purge`)
- `deployments`: the deployments `foundry serve` and `prefect.yaml` offer
- `automations`: Foundry's Prefect events, and an example automation (`foundry serve --automations`)

Each flow module sets up the environment when imported (a Prefect worker imports it directly).
"""
