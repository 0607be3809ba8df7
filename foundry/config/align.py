"""The `align` section of the config (`foundry.config.FoundryConfig.align`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from foundry.config.base import _Section


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
    max_steps: int = Field(600, ge=1)
    batch_size: int = Field(32, ge=1, description="Packed rows (sft) or preference pairs (dpo) per micro-batch.")
    learning_rate: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(30, ge=0)
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
        description="sft: share of each batch's rows that are windows of the parent's pretraining training split, "
        "trained on whole, against forgetting (the version must carry its pretraining data version); 0: none.",
    )
    replay_from: str = Field(
        "", description="Set by the align flow: the hydrated pretraining dataset replay draws its windows from."
    )
    prompts: list[str] = Field(
        ["Write in capital letters: river stone", "Add: 12 + 30", "Sort ascending: 41, 7, 19"],
        description="User messages whose replies, rendered through the chat template, are logged with every "
        "evaluation, the base's beside the aligned model's.",
    )
    max_new_tokens: int = Field(32, ge=1)
