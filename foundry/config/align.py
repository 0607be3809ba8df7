"""The `align` section of the config (`foundry.config.FoundryConfig.align`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from foundry.config.base import _Section
from foundry.config.training import train_override

AlignTrain = train_override(
    "AlignTrain",
    __name__,
    "Keys of `train` alignment sets otherwise (batch_size: packed rows for sft, preference pairs for dpo); the "
    "rest, and any key set to null, are `train`'s.",
    max_steps=600,
    batch_size=32,
    learning_rate=1e-3,
    warmup_steps=30,
)


class AlignConfig(_Section):
    """`foundry align MODEL_URI`: instruction tuning (sft) or preference optimisation (dpo) of a registered version."""

    method: Literal["sft", "dpo"] = Field(
        "sft",
        description="sft: next-token loss on assistant tokens of chat or prompt/response records; dpo: "
        "preference optimisation on prompt/chosen/rejected records against a frozen copy of the start.",
    )
    model_name: str = Field(
        "foundry-chat", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", description="Registered name of aligned versions."
    )
    train: AlignTrain = Field(
        AlignTrain(),
        description="Keys of `train` alignment sets otherwise; a key left out or null keeps `train`'s value.",
    )
    beta: float = Field(0.1, gt=0, description="DPO: strength of the pull towards the reference model.")
    sft_weight: float = Field(
        1.0,
        ge=0,
        description="DPO: weight of the chosen replies' own next-token loss beside the DPO loss; it keeps the "
        "policy generating them while it learns the preferences (0: DPO alone).",
    )
    replay_fraction: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Share of each batch (align.train.batch_size: packed rows for sft, pairs for dpo) that is "
        "windows of the parent's pretraining training split instead, every next token trained, against forgetting. "
        "sft: the windows are rows of the batch, in its one token-mean loss; dpo: the windows' mean next-token loss "
        "is added times windows/pairs, so each window weighs as much as one pair. The version must carry its "
        "pretraining data version, which the run hydrates and logs as the tag align.replay_source; 0: none.",
    )
    prompts: list[str] = Field(
        ["Write in capital letters: river stone", "Add: 12 + 30", "Sort ascending: 41, 7, 19"],
        description="User messages whose replies, rendered through the chat template, are logged with every "
        "evaluation, the base's beside the aligned model's.",
    )
    max_new_tokens: int = Field(
        32, ge=1, description="Most tokens of each reply to `prompts` (greedy decoding) logged with an evaluation."
    )
