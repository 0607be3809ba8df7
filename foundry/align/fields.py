"""What chat adds to the models every workload shares (named in its registration, `foundry.core.registrations`):
an aligned model's figures in `foundry evaluate`'s `ModelScores` (`ChatScores`). Its datasets' tokens are text's
(`foundry.pretrain.fields`): they are of the same modality."""

from __future__ import annotations

from pydantic import BaseModel

from foundry.core.contracts import _Value


class ChatScores(_Value):
    """An aligned model on chat data: the share of holdout conversations whose greedy reply is the reference
    reply, and nats per assistant token; both None when the model is not comparable (`note` says why)."""

    exact_match: float | None
    response_loss: float | None
    records: int  # holdout conversations scored
    note: str = ""


class ScoresFields(BaseModel):
    """An aligned model on chat records (`foundry.align.scoring`)."""

    chat: ChatScores | None = None  # on chat records
