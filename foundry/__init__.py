"""Foundry: raw text to a trained, validated, registered model, orchestrated by Prefect.

The library, by stage (A data acquisition and hydration; B model architecture and initialisation, in the
top-level `models` package, `training.warm_start` and `pretrain.parent_weights`; C the training loop; D checkpointing
and resilience; E validation and alignment):

- `data`: A, acquire, clean, validate, version and hydrate datasets
- `training`: C, the Lightning loop on one process or many, its launcher, the memory planner, warm starts
- `checkpointing`: D, checkpoints that survive failure and resume exactly
- `registry`: E, versions and aliases, the gates' inputs from the registry, lineage, the version a run starts from
- `gates`: E, the promotion gates as pure rules, each returning the one `Decision` type
- `align`: instruction tuning and preference optimisation: data, training, evaluation
- `specialists`: domain fine-tunes and merging them
- `reports`: what people read at the end of a run: summaries, model cards, plots
- `search`: hyperparameter search (Optuna on Dask)
- `evaluate`: `foundry evaluate`, registered versions scored on data of one's choice
- `purge`: `foundry purge`, every copy of a person's documents removed, what was trained on them retrained
- `gc`: `foundry gc`, what nothing refers to any more, deleted
- `vision`, `pretrain`: the image and text workloads (`core.workload`), each with its E, holdout metrics and
  baselines; `align` is the chat workload
- `export`: registered versions in the formats other tools open (transformers, GGUF, PEFT)
- `serving`: the registered model's own code, which travels with every version
- `config`: the one typed config

and the modules beside them:

- `cli`: the `foundry` command, one module per domain
- `core`: the typed values the stages hand each other, model URIs, digests, safe removal, redaction
- `runtime`: environment, logs, progress, MLflow bookkeeping, run ownership, deployment policy
- `energy`: the energy each stage of a run used, measured (NVML, RAPL) or estimated from CPU time, on its run
- `ops`: local servers (`foundry up`) and health (`foundry doctor`), one module each
- `contracts`: the old path of `core.contracts`, which cached Prefect results name

Importing any of it changes nothing: entry points call `foundry.runtime.env.configure_environment()` once.
"""
