"""Stages B-C: build the model from config and train it with Lightning on hydrated shards.

Rank 0 logs to the pipeline's MLflow run, named explicitly. The result is a self-contained
checkpoint (`model.pt`: model args, weights, config, data version) that rebuilds the model alone.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from foundry.config import FoundryConfig
from models.data import RandomWindows, SequentialWindows
from models.gpt import GPT, GPTConfig
from tasks.shards import load_split

log = logging.getLogger(__name__)


def model_args(config: FoundryConfig, vocab_size: int) -> dict:
    return {"vocab_size": vocab_size, **config.model.model_dump()}


def _loaders(config: FoundryConfig, data_dir: Path, rank: int):
    t, m = config.train, config.model
    train_tokens, holdout_tokens = load_split(data_dir, "train"), load_split(data_dir, "holdout")
    steps_per_epoch = max(1, len(train_tokens) // (t.batch_size * m.block_size))
    train = RandomWindows(train_tokens, m.block_size, t.batch_size, t.seed, steps_per_epoch, rank=rank)
    val = SequentialWindows(holdout_tokens, m.block_size, t.batch_size, max_batches=t.val_batches)
    return train, val


def _trainer(config: FoundryConfig, run_id: str | None, checkpoint_dir: Path, progress: bool):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import MLFlowLogger
    from lightning.pytorch.plugins.environments import LightningEnvironment

    t, c = config.train, config.checkpoint
    loggers = []
    if run_id is not None:
        import mlflow

        loggers.append(MLFlowLogger(tracking_uri=mlflow.get_tracking_uri(), run_id=run_id))
    checkpoints = ModelCheckpoint(
        dirpath=checkpoint_dir, filename="step-{step:06d}", auto_insert_metric_name=False,
        every_n_train_steps=c.every_n_steps, save_top_k=c.keep_last, monitor="step", mode="max", save_last=True,
    )
    return L.Trainer(
        accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes, precision=t.precision,
        strategy="ddp" if t.devices * t.num_nodes > 1 else "auto",
        max_steps=t.max_steps, gradient_clip_val=t.grad_clip or None,
        val_check_interval=t.val_every_n_steps, check_val_every_n_epoch=None, limit_val_batches=t.val_batches,
        num_sanity_val_steps=0, log_every_n_steps=t.log_every_n_steps, logger=loggers or False,
        callbacks=[checkpoints], enable_progress_bar=progress, enable_model_summary=progress,
        default_root_dir=checkpoint_dir, plugins=[LightningEnvironment()],
    )


def train(
    config: FoundryConfig, data_dir: Path, checkpoint_dir: Path, run_id: str | None = None,
    data_version: str = "", progress: bool = True,
) -> Path:
    """Train to `train.max_steps`, resuming from `checkpoint_dir/last.ckpt` if a previous try left one."""
    import lightning as L

    from models.lit_gpt import LitGPT

    manifest = json.loads((data_dir / "manifest.json").read_text())
    L.seed_everything(config.train.seed, workers=True, verbose=False)
    args = model_args(config, manifest["vocab_size"])
    t = config.train
    module = LitGPT(args, t.learning_rate, t.weight_decay, t.warmup_steps, t.max_steps, t.min_lr_ratio)
    trainer = _trainer(config, run_id, checkpoint_dir, progress)
    train_loader, val_loader = _loaders(config, data_dir, trainer.global_rank)
    last = checkpoint_dir / "last.ckpt"
    trainer.fit(module, train_loader, val_loader, ckpt_path=str(last) if last.exists() else None)
    final = checkpoint_dir / "model.pt"
    if trainer.global_rank == 0:
        save_model(final, module.model, config, data_version)
    return final


def save_model(path: Path, model: GPT, config: FoundryConfig, data_version: str) -> None:
    """Everything needed to rebuild the model, and nothing that needs this code base's paths."""
    torch.save(
        {"model_args": model.config.to_dict(), "state_dict": model.state_dict(),
         "config": config.model_dump(mode="json"), "data_version": data_version},
        path,
    )


def load_model(path: Path) -> GPT:
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**checkpoint["model_args"]))
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval()
