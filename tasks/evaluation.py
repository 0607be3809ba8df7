"""Stage E, validation, as a Prefect task: holdout metrics beside baselines, generations (text) or plots (images),
the loss curve; what each is, the data's workload says (`Workload.validate`)."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from foundry.core.contracts import RunContext
from foundry.core.metrics.baselines import BaselinedMetrics


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate(config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext) -> BaselinedMetrics:
    """Holdout loss, perplexity and bits per byte beside unigram, gzip, xz, xz -9e, PPMd order 16 and zpaq (as
    `evaluation.baselines` asks); generations; loss curve. An image dataset: accuracy, macro F1 and per-class
    accuracy beside the majority class and the nearest class mean; the confusion matrix and the misclassified
    images. Its energy is recorded on the run (`energy/evaluate/joules`)."""
    from foundry.core.workload import for_data
    from foundry.energy.tracked import measured

    with measured(run, "evaluate", config.energy):
        metrics = for_data(data_dir).validate_model(config, checkpoint, data_dir, run)
    get_run_logger().info("holdout: %s", {k: round(v, 4) for k, v in metrics.as_mlflow().items()})
    return metrics
