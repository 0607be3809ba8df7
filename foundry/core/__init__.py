"""The small core every feature builds on, importing no feature:

- `contracts`: the typed values the stages hand each other
- `preparing`: what preparing a dataset builds on, and how it runs
- `process_pool`: map steps on worker processes of this machine, one core each, results in order
- `forking`: forking worker processes with the parent's heap frozen, so their collections do not copy it
- `model_uri`: a registered model's URI, parsed in one place
- `digests`: file digests, one read per file
- `fs`: removing folders without ever leaving the folder meant to hold them
- `metrics`: what a model scored, as typed values (holdout, aligned, images)
- `energy`: what a run's stages used (a meter's `Reading`, `StageEnergy`, `RunEnergy`): metrics, CO2, card lines
- `open_union`: fields typed as a base class that take any subclass registered under it (metrics, gate inputs)
- `version_tags`: the MLflow tags Foundry sets on a run and a registered version, named and written in one place
- `gate_tags`: the `gate.*` tags recording a gate's decision and its inputs, named in one place
- `run_tags`: the MLflow tags Foundry sets on its runs (stage, flow run, search, run owner), named in one place
- `workload`: the Workload interface and the registry of workloads (text, chat, image)
- `registrations`: the table registering each workload (its module, modality, dataset kinds, what it adds to the
  shared models), and what derives from it
- `extended`: the shared models (config, manifest, scores) built with the fields each registered workload adds
- `config_section`: what every config section shares, the config's and a workload's own alike
- `redact`: URLs and connection strings as Foundry logs, saves and shows them: credentials masked
"""
