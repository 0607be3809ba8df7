"""Registry values without training: a version carrying the tags a test sets, and a run to log a model to."""

from __future__ import annotations

from foundry.config import FoundryConfig


def register_tagged(config: FoundryConfig, name: str, tags: dict[str, str]):
    """A version of `name` in the session's embedded MLflow registry, its champion, carrying the `tags` an
    attacker set; returns the MLflow ModelVersion."""
    from foundry.registry import versions
    from foundry.runtime import tracking

    run_id = tracking.start_pipeline_run(config, run_name=f"hostile-{name}")
    version = versions.publish(f"runs:/{run_id}/none", name, run_id, tags, True, "seeded by the test").version
    return tracking.client().get_model_version(name, version)


def new_run(name: str) -> str:
    """A run of its own in the session's MLflow `foundry` experiment, to log a model to."""
    from foundry.runtime import tracking

    return tracking.client().create_run(tracking.experiment_id("foundry"), run_name=name).info.run_id
