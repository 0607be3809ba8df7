"""The Prefect tasks: thin wrappers that call the stage library (`foundry.*`), log to MLflow and carry
retries and caching on their decorators.

- `data`: stage A: acquire, prepare, validate, version (one cached `dataset` task), hydrate
- `data_parallel`: preparation's map steps as task runs on Dask, or all of it in this process
- `training`: stages B-D: training that a retry, or a re-run after a crash, resumes exactly
- `candidate`: hydrate, train, evaluate: the trained candidate the training flows judge
- `evaluation`: stage E: holdout metrics beside baselines, generations, the loss curve
- `registry`: stage E: what a run builds on, the gate, publication and its events
- `align`: alignment: the starting version, its data, evaluation beside the base, gate, registration; what
  `reproduce` of an aligned version replays and scores
- `merge`: merging specialists: the base, the merged weights, scores, gate, publication
- `search`: hyperparameter search: each trial a task run on a Dask worker
- `evaluate`: `foundry evaluate`'s steps as task runs
- `gc`, `purge`: `foundry gc` and `foundry purge` as task runs
- `artifacts`: what the Prefect run page shows: summary, data stage, MLflow links, progress
- `locks`: the `dataset` cache-key lock and each model's promotion lock
- `policy`: the operator's check of a deployment run's parameters, every flow's first task
- `pyfunc_model`: not a task: the served model's old import path, for versions registered before it moved
"""
