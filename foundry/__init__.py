"""Foundry: raw text to a trained, validated, registered model, orchestrated by Prefect.

The library, by stage (A data acquisition and hydration; B model architecture and initialisation, in the
top-level `models` package and `training.warm_start`; C the training loop; D checkpointing and resilience;
E validation and alignment):

- `data`: A, acquire, clean, validate, version and hydrate datasets
- `training`: C, the Lightning loop on one process or many, its launcher, the memory planner, warm starts
- `checkpointing`: D, checkpoints that survive failure and resume exactly
- `evaluation`: E, holdout metrics and baselines
- `registry`: E, versions and aliases, the gates' inputs from the registry, lineage, the version a run starts from
- `gates`: E, the promotion gates as pure rules, each returning the one `Decision` type
- `align`: instruction tuning and preference optimisation: data, training, evaluation
- `specialists`: domain fine-tunes and merging them
- `reports`: what people read at the end of a run: summaries, model cards, plots
- `search`: hyperparameter search (Optuna on Dask)
- `serving`: the registered model's own code, which travels with every version
- `config`: the one typed config

and the modules beside them:

- `cli`: the `foundry` command, one module per domain
- `contracts`: the typed values the stages hand each other
- `deployment_policy`: what a run started from a deployment may point at: the operator's allow-lists
- `digests`: file digests, one read per file
- `env`: where state lives and the switches that keep every library offline
- `fs`: removing folders without ever leaving the folder meant to hold them
- `logs`: each log line once, third-party loggers routed through the process's handlers
- `model_uri`: a registered model's URI (`models:/NAME/VERSION`, `models:/NAME@ALIAS`), parsed in one place
- `ops`: local servers (`foundry up`) and health (`foundry doctor`)
- `periodic`: doing something every few seconds while a stage runs
- `progress`: progress as a small JSON file the orchestrator reads
- `redact`: URLs and connection strings as Foundry logs, saves and shows them: credentials masked
- `run_owner`: which process owns a pipeline run, so a run whose process died is marked FAILED
- `tracking`: MLflow bookkeeping: the experiment, the pipeline run, its lineage

Importing any of it changes nothing: entry points call `foundry.env.configure_environment()` once.
"""
