"""The `finetune` and `merge` sections: specialising a registered model, and merging specialists."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, field_validator

from foundry.config.base import _Section
from foundry.config.training import ADAMW_LEARNING_RATE, train_override

# The GPT's projections by the end of their path ("proj" is both attn.proj and mlp.proj). Not lm_head:
# it is tied to the embedding, so an adapter there would change the input side too.
LoRATarget = Literal["attn.qkv", "attn.proj", "mlp.fc", "mlp.proj", "qkv", "fc", "proj"]
MODEL_NAME = r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)?$"  # the registry's pattern; empty: derived


def _slug(text: str) -> str:
    """A source (path or URL) as a registry-safe name part: its last path segment, odd characters dashed."""
    last = PurePosixPath(text.rstrip("/").split("://", 1)[-1]).name or "data"
    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", last).strip("-.") or "data"


# Fine-tunes train every weight (or the adapters) with AdamW, at the rate the study chose for it.
FinetuneTrain = train_override(
    "FinetuneTrain",
    __name__,
    "Keys of `train` a fine-tune sets otherwise (every weight, or the adapters, from a registered version: AdamW); "
    "the rest, and any key set to null, are `train`'s.",
    learning_rate=ADAMW_LEARNING_RATE,
    weight_decay=0.1,
)


class FinetuneConfig(_Section):
    method: Literal["full", "lora"] = Field(
        "full", description="full: train every weight; lora: train low-rank adapters only, merged in at the end."
    )
    lora_rank: int = Field(8, ge=1, description="Rank r of each adapter (lora).")
    lora_alpha: float = Field(16.0, gt=0, description="Adapter scale is lora_alpha / lora_rank (lora).")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on an adapter's input (lora).")
    lora_targets: list[LoRATarget] = Field(
        ["attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"],
        min_length=1,
        description="Linear modules that get adapters, by the end of their path (lora).",
    )
    model_name: str = Field(
        "",
        pattern=MODEL_NAME,
        description="Registered model name of the specialist; empty: the base's name and the source's last "
        "path segment, e.g. foundry-gpt-contracts.",
    )
    train: FinetuneTrain = Field(
        FinetuneTrain(),
        description="Keys of `train` a fine-tune sets otherwise; a key left out or null keeps `train`'s value.",
    )

    def resolved_model_name(self, base_name: str, source: str) -> str:
        return self.model_name or f"{base_name}-{_slug(source)}"


class MergeConfig(_Section):
    method: Literal["linear", "task_arithmetic", "ties", "dare_ties"] = Field(
        "ties",
        description="linear: weighted average; task_arithmetic: base + scale x sum of task vectors; ties: trim, "
        "elect sign, disjoint mean; dare_ties: seeded drop-and-rescale, then TIES.",
    )
    weights: list[float] = Field([], description="One weight per merged model, in order; empty: 1 each.")
    density: float = Field(
        0.5, gt=0, le=1, description="Share of each task vector kept (ties: largest; dare_ties: random)."
    )
    scale: float = Field(1.0, gt=0, description="lambda: the merged task vector's scale (all but linear).")
    seed: int = Field(0, description="Seed of DARE's drop mask.")
    base: str = Field(
        "", description="models:/NAME/VERSION to add task vectors to; empty: the common ancestor in their lineage."
    )
    force: bool = Field(False, description="Merge onto `base` even when it is not the models' common ancestor.")
    max_gap: float = Field(
        0.05, ge=0, description="Bits per byte the merge may trail each specialist on that specialist's holdout."
    )
    model_name: str = Field(
        "", pattern=MODEL_NAME, description="Registered model name of the merge; empty: the base's name + '-merged'."
    )

    @field_validator("weights")
    @classmethod
    def _positive_weights(cls, weights: list[float]) -> list[float]:
        # TIES elects signs over weighted task vectors: a negative weight would flip a model's vote.
        if any(w <= 0 for w in weights):
            raise ValueError(f"every weight must be positive, got {weights}")
        return weights

    def resolved_model_name(self, base_name: str) -> str:
        return self.model_name or f"{base_name}-merged"
