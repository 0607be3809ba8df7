"""Foundry: raw text to a trained, validated, registered model, orchestrated by Prefect.

The library is grouped by stage: `data` (A: acquire, clean, validate, version, hydrate), `training`
(C: the Lightning loop and its launcher), `checkpointing` (D), `evaluation` and `registry` (E),
`serving` (the registered model's own code). The model itself is in the top-level `models` package.
Importing any of it changes nothing: entry points call `foundry.env.configure_environment()` once.
"""
