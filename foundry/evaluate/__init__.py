"""`foundry evaluate`: registered versions scored on data of one's choice, beside the baselines.

- `scores`: the typed values and the text workload's scoring; `steps`: the flow's steps in a row
- `baselines`: per-group baselines; `chat`, `images`: the chat and image workloads' scoring
- `runs`: one MLflow run per model; `report`: the comparison as markdown
"""
