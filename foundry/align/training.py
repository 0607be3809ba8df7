"""Stage C for alignment: the LightningModule and the loaders for a chat or preference dataset.

`foundry.training.trainer.train` asks here when the dataset's manifest says its `kind` is `chat` (SFT) or
`preference` (DPO); everything else (the Trainer, checkpoints, exact resume, several processes, `model.pt`)
is pretraining's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from foundry.config import FoundryConfig
from foundry.core.contracts import Replay
from foundry.core.workload import named
from foundry.data.manifest import DatasetManifest
from foundry.pretrain.parent_weights import text_start


def build_aligned_module(config: FoundryConfig, args: dict, kind: str, train_settings: dict):
    """`LitSFT`, or `LitDPO` whose frozen reference is `train.init_from`: the weights it starts from, also when
    the run resumes from a checkpoint (the checkpoint holds the policy only)."""
    from models.lit_align import LitDPO, LitSFT

    if kind == "chat":
        return _ahead_frozen(LitSFT(args, **train_settings))
    if not config.train.init_from:
        raise ValueError("DPO needs a starting model (train.init_from): the reference is a frozen copy of it")
    module = LitDPO(args, beta=config.align.beta, sft_weight=config.align.sft_weight, **train_settings)
    start = torch.load(config.train.init_from, map_location="cpu", weights_only=True)
    module.set_reference(text_start(start, module.model.config))  # a parent of other settings: named, not a shape
    return _ahead_frozen(module)


def _ahead_frozen(module):
    """A parent's multi-token prediction matrices (`model.mtp_depth`) kept as they are: SFT's loss and DPO's pairs
    read the next-token head alone, and under DDP a trainable parameter without a gradient fails the step."""
    if module.model.ahead is not None:
        module.model.ahead.requires_grad_(False)
    return module


def aligned_loaders(
    config: FoundryConfig,
    data_dir: Path,
    manifest: DatasetManifest,
    rank: int,
    world_size: int,
    replay: Replay | None = None,
):
    """(train, validation) loaders over the dataset's splits; padding is end-of-text and predicts nothing.
    With `align.replay_fraction`, each training batch brings windows of `replay`'s training split: SFT's as
    rows after its packed conversations, DPO's beside its pairs."""
    from foundry.align.records import load_conversations, load_pairs
    from models.align_data import (
        PackedConversations,
        PairsWithReplay,
        PreferenceBatches,
        Sized,
        WithReplay,
        pack,
        sequential_conversations,
        sequential_pairs,
    )

    t, block, pad = config.train, config.model.block_size, manifest.eot_id
    replay_rows = replayed_rows(config, manifest.kind, replay)
    if manifest.kind == "chat":
        train = PackedConversations(
            load_conversations(data_dir, "train"), block, t.batch_size - replay_rows, t.seed, pad, rank, world_size
        )
        if replay_rows:
            train = WithReplay(train, replay_windows(config, manifest, replay, replay_rows, rank, world_size))
        held = load_conversations(data_dir, "holdout")
        rows = len(pack(np.arange(len(held.tokens)), held.tokens.lengths(), block))
        val = Sized(
            lambda: sequential_conversations(held, block, t.batch_size, pad, t.val_batches),
            min(t.val_batches, -(-rows // t.batch_size)),
        )
        return train, val
    train = PreferenceBatches(load_pairs(data_dir, "train"), t.batch_size - replay_rows, t.seed, pad, rank, world_size)
    if replay_rows:
        train = PairsWithReplay(train, replay_windows(config, manifest, replay, replay_rows, rank, world_size))
    pairs = load_pairs(data_dir, "holdout")
    batches = min(t.val_batches, -(-len(pairs.prompt) // t.batch_size))
    return train, Sized(lambda: sequential_pairs(pairs, t.batch_size, pad, t.val_batches), batches)


def replayed_rows(config: FoundryConfig, kind: str, replay: Replay | None) -> int:
    """Units of each batch (`train.batch_size`: packed rows for SFT, pairs for DPO) that are windows of
    pretraining text instead: `align.replay_fraction` of them, at least one when replaying, and at least one
    left for the records; `replay` is where the windows come from."""
    a, batch = config.align, config.train.batch_size
    if a.replay_fraction == 0:
        return 0
    if replay is None:
        raise ValueError(
            "align.replay_fraction > 0 needs the pretraining data to replay: `foundry align` hydrates the base's "
            "(pretrain.data_version); a trainer started otherwise must be handed it (a Replay)"
        )
    rows = max(1, round(a.replay_fraction * batch))
    if rows >= batch:
        records = "conversations" if kind == "chat" else "preference pairs"
        raise ValueError(f"align.replay_fraction {a.replay_fraction} of {batch} rows leaves none for {records}")
    return rows


def replay_windows(
    config: FoundryConfig, manifest: DatasetManifest, replay: Replay, rows: int, rank: int, world_size: int
):
    """Seeded windows of the pretraining training split, in the base's token ids (the chat tokens only add ids)."""
    from foundry.pretrain.shards import load_split
    from models.data import RandomWindows, RankDraw

    source = replay.dir
    pretraining = DatasetManifest.read(source)
    if not named("text").reads(pretraining) or pretraining.vocab_size > manifest.vocab_size:
        raise ValueError(
            f"{source} is not pretraining text in this model's vocabulary "
            f"({pretraining.kind}, {pretraining.vocab_size} ids; the model has {manifest.vocab_size})"
        )
    tokens, block = load_split(source, "train"), config.model.block_size
    steps = max(1, len(tokens) // (rows * world_size * block))
    return RandomWindows(tokens, block, rows, RankDraw(config.train.seed + 1, steps, rank, world_size))
