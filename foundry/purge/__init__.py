"""`foundry purge`: every copy of a person's documents found (`search`) and removed (`apply`), and what was
trained on them retrained (`retrain`).

- `search`, `plan`: the dry run and what it found; `registry`, `data`, `stores`, `s3`: where it looks
- `artifacts`, `served`, `home`, `ledgers`, `prefect_runs`, `unchecked`: the copies outside a data version
- `traces`, `prefect_traces`, `mlflow_traces`, `trace_stores`: what Prefect and MLflow keep in their own stores
  (parameters, state messages, logs, events; params, tags, dataset inputs, descriptions)
- `apply`, `rewrite`, `cuts`, `commit`, `record`: the removal, step by step, and its record
- `retrain`: the jobs that train again on the purged data, and the derived versions left to rebuild by hand
"""
