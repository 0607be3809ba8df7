"""Hyperparameter search: the space in the config (`foundry.config.search`), an Optuna study that survives a kill, trials that train
with the pipeline's own code, and what the study leaves (MLflow runs, plots, the best config).

- `study`: the Optuna study: storage, sampler, pruner, continuing after a kill
- `trial`: one trial on a worker, trained and scored by the pipeline's own code
- `callbacks`: pruning reports and the time box, as Lightning callbacks
- `records`: the study's MLflow runs, plots and best config
"""
