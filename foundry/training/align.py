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

KINDS = ("chat", "preference")


def build_aligned_module(config: FoundryConfig, args: dict, kind: str, train_settings: dict):
    """`LitSFT`, or `LitDPO` whose frozen reference is `train.init_from`: the weights it starts from, also when
    the run resumes from a checkpoint (the checkpoint holds the policy only)."""
    from models.lit_align import LitDPO, LitSFT

    if kind == "chat":
        return LitSFT(args, **train_settings)
    if not config.train.init_from:
        raise ValueError("DPO needs a starting model (train.init_from): the reference is a frozen copy of it")
    module = LitDPO(args, beta=config.align.beta, sft_weight=config.align.sft_weight, **train_settings)
    start = torch.load(config.train.init_from, map_location="cpu", weights_only=True)
    module.set_reference(start["state_dict"])
    return module


def aligned_loaders(config: FoundryConfig, data_dir: Path, manifest: dict, rank: int, world_size: int):
    """(train, validation) loaders over the dataset's splits; padding is end-of-text and predicts nothing."""
    from foundry.data.chat import load_conversations, load_pairs
    from models.align_data import (
        PackedConversations,
        PreferenceBatches,
        Sized,
        pack,
        sequential_conversations,
        sequential_pairs,
    )

    t, block, pad = config.train, config.model.block_size, manifest["eot_id"]
    if manifest["kind"] == "chat":
        train = PackedConversations(
            load_conversations(data_dir, "train"), block, t.batch_size, t.seed, pad, rank, world_size
        )
        held = load_conversations(data_dir, "holdout")
        rows = len(pack(np.arange(len(held.tokens)), held.tokens.lengths(), block))
        val = Sized(
            lambda: sequential_conversations(held, block, t.batch_size, pad, t.val_batches),
            min(t.val_batches, -(-rows // t.batch_size)),
        )
        return train, val
    train = PreferenceBatches(load_pairs(data_dir, "train"), t.batch_size, t.seed, pad, rank, world_size)
    pairs = load_pairs(data_dir, "holdout")
    batches = min(t.val_batches, -(-len(pairs.prompt) // t.batch_size))
    return train, Sized(lambda: sequential_pairs(pairs, t.batch_size, pad, t.val_batches), batches)
