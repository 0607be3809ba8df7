"""Stage E for a pretrained language model: holdout loss, perplexity and bits per byte beside unigram, gzip, xz,
xz -9e, PPMd order 16 and the zpaq levels `evaluation.baselines` asks for, logged on its run with generations from
the configured prompts and the loss curve."""

from __future__ import annotations

import logging
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.contracts import RunContext
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.runtime import tracking

log = logging.getLogger(__name__)


def validate(config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext) -> HoldoutMetrics:
    from tokenizers import Tokenizer

    from foundry.pretrain.compressors import absent_baselines, compression_baselines
    from foundry.pretrain.holdout_metrics import holdout_metrics
    from foundry.reports.plots import loss_curve
    from models.generate import Sampling, generate_texts
    from models.gpt import load_gpt

    e = config.evaluation
    model = load_gpt(checkpoint)
    metrics = holdout_metrics(
        model, data_dir / "tokenizer.json", data_dir, e.batch_size, e.max_tokens, e.window_overlap
    )
    scores = compression_baselines(data_dir, e.compression_context_bytes, e.strong_context_bytes, e.baselines)
    metrics = metrics.with_scores(scores, absent_baselines(e.baselines))
    if metrics.absent_baselines:
        log.warning(metrics.absent_line())
    tracking.log_metrics(run.run_id, metrics.as_mlflow())
    tokenizer = Tokenizer.from_file(str(data_dir / "tokenizer.json"))
    completions = generate_texts(
        model, tokenizer, e.prompts, Sampling(max_new_tokens=e.max_new_tokens, seed=e.generation_seed)
    )
    tracking.client().log_table(
        run.run_id, {"prompt": e.prompts, "completion": completions}, "evaluation/generations.json"
    )
    history = {key: tracking.metric_history(run.run_id, key) for key in ("train/loss", "val/loss")}
    tracking.log_artifact(run.run_id, loss_curve(history, run.dir / "loss_curve.png"), "evaluation")
    return metrics
