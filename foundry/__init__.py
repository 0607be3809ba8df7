"""Foundry: raw text to a trained, validated, registered model, orchestrated by Prefect."""

from foundry.env import configure_environment

# Before any of Prefect, MLflow, DVC or GX is imported anywhere in the process.
configure_environment()
