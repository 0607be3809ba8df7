"""Stage C for text: the GPT's arguments, the loaders of token shards and the blocks FSDP wraps. The chat workload
trains the same GPT (`foundry.align.training`) and takes the arguments and the blocks from here."""

from __future__ import annotations

from pathlib import Path

import torch

from foundry.config import FoundryConfig
from foundry.data.manifest import DatasetManifest


def model_args(config: FoundryConfig, vocab_size: int) -> dict:
    return {"vocab_size": vocab_size, **config.model.model_dump()}


def text_loaders(config: FoundryConfig, data_dir: Path, rank: int, world_size: int):
    """(train, validation) loaders of a token dataset: seeded random windows of the training split, every rank
    its own, the batch ramped up over `train.ramp_steps`; the holdout's first windows in order. The training
    windows of each optimizer step depend on the global batch, not on how ranks and accumulation share it."""
    from foundry.pretrain.shards import load_split
    from models.data import BatchRamp, RandomWindows, RankDraw, SequentialWindows, epoch_batches

    t, m = config.train, config.model
    train_tokens, holdout_tokens = load_split(data_dir, "train"), load_split(data_dir, "holdout")
    # Epochs of whole optimizer steps of the global batch: the same windows whatever the world size.
    global_rows = t.batch_size * world_size * t.grad_accum_steps
    steps_per_epoch = epoch_batches(len(train_tokens), m.block_size, global_rows, t.grad_accum_steps)
    ramp = BatchRamp(t.ramp_steps, t.batch_ramp_rows, t.grad_accum_steps)
    draw = RankDraw(t.seed, steps_per_epoch, rank, world_size)
    train = RandomWindows(train_tokens, m.block_size, t.batch_size, draw, ramp)
    val = SequentialWindows(holdout_tokens, m.block_size, t.batch_size, max_batches=t.val_batches)
    return train, val


def gpt_blocks(module: torch.nn.Module) -> set[type[torch.nn.Module]]:
    """The GPT's transformer block class, when `module` holds one: FSDP wraps the blocks one by one."""
    from models.gpt import Block

    return {type(m) for m in module.modules() if isinstance(m, Block)}


def vocabulary_only(vocab_size: int, kind: str = "text") -> DatasetManifest:
    """The manifest of a token dataset of `kind` with no records, in a vocabulary of `vocab_size` ids: what builds a
    module before any data is prepared (a memory plan, a benchmark on random tokens)."""
    return DatasetManifest(
        kind=kind,
        source="",
        source_digest="",
        source_skipped={},
        stats={},
        holdout_fraction=0.0,
        vocab_size=vocab_size,
        eot_id=0,
        train_tokens=0,
        holdout_tokens=0,
    )
