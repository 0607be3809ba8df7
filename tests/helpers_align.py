"""Alignment: conversations for the samplers, the resumable-loader check, and the smallest
LightningModule's settings."""

from __future__ import annotations

import numpy as np

from models.align_data import Conversations, Ragged


def many_conversations(n: int = 30) -> Conversations:
    rng = np.random.default_rng(0)
    tokens = [[30, *rng.integers(1, 29, size=int(rng.integers(2, 9))).tolist(), 33] for _ in range(n)]
    trained = [[0] * (len(t) // 2) + [1] * (len(t) - len(t) // 2) for t in tokens]
    return Conversations(Ragged.from_lists(tokens), Ragged.from_lists(trained))


def as_lists(batches) -> list:
    return [[t.tolist() for t in batch] for batch in batches]


def assert_resumes_exactly(make) -> None:
    """A loader `make()` builds, stopped after three batches and resumed from its state through JSON, yields what
    one uninterrupted loader yields over two epochs."""
    import json

    full = make()
    uninterrupted = as_lists(list(full) + list(full))
    first = make()
    batches = iter(first)
    seen = as_lists([next(batches) for _ in range(3)])
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert seen + as_lists(list(resumed) + list(resumed)) == uninterrupted
    from foundry.training.trainer import close_loader

    for loader in (full, first, resumed):  # worker processes (`ShardBatches.close`) end now, not at a collection
        close_loader(loader)


# A LightningModule of the alignment methods, as small as it gets, and its optimiser settings.
TINY_LIT_ARGS = {"vocab_size": 40, "block_size": 16, "n_layer": 1, "n_head": 2, "n_embd": 16, "dropout": 0.0}
TINY_LIT_SETTINGS = dict(
    learning_rate=1e-2,
    optimizer="adamw",
    muon_learning_rate=0.02,
    weight_decay=0.0,
    warmup_steps=0,
    max_steps=5,
    min_lr_ratio=1.0,
    log_every_n_steps=100,
    peak_flops=0.0,
)
