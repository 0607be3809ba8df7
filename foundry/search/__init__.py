"""Hyperparameter search: the space in the config, an Optuna study that survives a kill, trials that train
with the pipeline's own code, and what the study leaves (MLflow runs, plots, the best config)."""
