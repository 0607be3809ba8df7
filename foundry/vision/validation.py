"""Stage E for an image classifier: accuracy, macro F1 and per-class accuracy beside the majority class and the
nearest class mean, logged on its run with the confusion matrix and the misclassified images."""

from __future__ import annotations

from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.contracts import RunContext
from foundry.core.metrics.images import VisionMetrics
from foundry.runtime import tracking


def validate(config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext) -> VisionMetrics:
    """The holdout metrics on the run, the plots as the run's `evaluation/` artifacts."""
    from foundry.vision.evaluate import evaluate_images as holdout_scores

    plots = run.dir / "evaluation"
    metrics = holdout_scores(config, checkpoint, data_dir, plots_dir=plots)
    tracking.log_metrics(run.run_id, metrics.as_mlflow())
    for name in ("confusion_matrix.png", "misclassified.png"):
        tracking.log_artifact(run.run_id, plots / name, "evaluation")
    return metrics
