"""`foundry evaluate`: registered versions scored on data of one's choice, beside the baselines.

- `scores`: the typed values, the models and the data; `steps`: the flow's steps in a row
- `scoring`: what the steps ask of the data's workload (its scoring lives in its own folder: `foundry.pretrain`,
  `foundry.align`, `foundry.vision`)
- `runs`: one MLflow run per model; `report`: the comparison as markdown
"""
