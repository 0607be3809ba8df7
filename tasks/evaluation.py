"""Stage E, validation, as a Prefect task: holdout metrics beside baselines, generations (text) or plots (images),
the loss curve."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from foundry.core.contracts import RunContext
from foundry.evaluation.holdout_metrics import HoldoutMetrics
from foundry.runtime import tracking
from foundry.vision.metrics import VisionMetrics


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate(
    config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext
) -> HoldoutMetrics | VisionMetrics:
    """Holdout loss, perplexity and bits per byte beside unigram, gzip, xz, xz -9e and PPMd order 16; generations;
    loss curve. An image dataset: accuracy, macro F1 and per-class accuracy beside the majority class and the
    nearest class mean; the confusion matrix and the misclassified images."""
    from foundry.vision.evaluate import is_image_dataset

    if is_image_dataset(data_dir):
        return evaluate_images(config, checkpoint, data_dir, run)
    from tokenizers import Tokenizer

    from foundry.evaluation.compressors import compression_baselines
    from foundry.evaluation.metrics import holdout_metrics
    from foundry.reports.plots import loss_curve
    from models.generate import generate_texts
    from models.gpt import load_gpt

    e = config.evaluation
    model = load_gpt(checkpoint)
    metrics = holdout_metrics(
        model, data_dir / "tokenizer.json", data_dir, e.batch_size, e.max_tokens, e.window_overlap
    )
    metrics = metrics.with_scores(compression_baselines(data_dir, e.compression_context_bytes, e.strong_context_bytes))
    tracking.log_metrics(run.run_id, metrics.as_mlflow())
    tokenizer = Tokenizer.from_file(str(data_dir / "tokenizer.json"))
    completions = generate_texts(model, tokenizer, e.prompts, e.max_new_tokens, seed=e.generation_seed)
    tracking.client().log_table(
        run.run_id, {"prompt": e.prompts, "completion": completions}, "evaluation/generations.json"
    )
    history = {key: tracking.metric_history(run.run_id, key) for key in ("train/loss", "val/loss")}
    tracking.log_artifact(run.run_id, loss_curve(history, run.dir / "loss_curve.png"), "evaluation")
    get_run_logger().info("holdout: %s", {k: round(v, 4) for k, v in metrics.as_mlflow().items()})
    return metrics


def evaluate_images(config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext) -> VisionMetrics:
    """An image classifier's holdout metrics on the run, its plots as the run's `evaluation/` artifacts."""
    from foundry.vision.evaluate import evaluate_images as holdout_scores

    plots = run.dir / "evaluation"
    metrics = holdout_scores(config, checkpoint, data_dir, plots_dir=plots)
    tracking.log_metrics(run.run_id, metrics.as_mlflow())
    for name in ("confusion_matrix.png", "misclassified.png"):
        tracking.log_artifact(run.run_id, plots / name, "evaluation")
    get_run_logger().info("holdout: %s", {k: round(v, 4) for k, v in metrics.as_mlflow().items()})
    return metrics
