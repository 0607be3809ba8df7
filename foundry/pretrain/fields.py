"""What text adds to the models every workload shares (named in its registration, `foundry.core.registrations`).

`ManifestFields`: what every text dataset's manifest has and an image dataset's has not, its tokens (documents and
alignment records alike: the chat workload's data is text too). `ScoresFields`: a language model's figures in
`foundry evaluate`'s `ModelScores`, on documents overall and per group of source files (`GroupScore`).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel

from foundry.core.contracts import _Value
from foundry.core.metrics.holdout import HoldoutMetrics


class ManifestFields(BaseModel):
    """A text dataset's tokens, required on one (`foundry.data.manifest`); placed where they were always written."""

    placed_after: ClassVar[dict[str, str]] = {"vocab_size": "ledger", "train_tokens": "shards"}

    vocab_size: int | None = None  # text: required
    eot_id: int | None = None  # text: required
    train_tokens: int | None = None  # text: required
    holdout_tokens: int | None = None  # text: required


class GroupScore(_Value):
    bits_per_byte: float
    loss: float
    tokens: int
    bytes: int


class ScoresFields(BaseModel):
    """A language model on documents (`foundry.pretrain.scoring`)."""

    metrics: HoldoutMetrics | None = None  # loss, perplexity, bits per byte, tokens (on documents)
    groups: dict[str, GroupScore] = {}
