"""LoRA fine-tuning's files: the adapters' spec from the config, and the adapters in PEFT's format."""

from __future__ import annotations

import logging
from pathlib import Path

from foundry.config import FoundryConfig

log = logging.getLogger(__name__)


def lora_spec(config: FoundryConfig):
    from models.lora import LoRASpec

    f = config.finetune
    if not config.train.init_from:
        raise ValueError(
            "finetune.method lora trains adapters on a model's weights: set train.init_from (foundry finetune does)"
        )
    return LoRASpec(rank=f.lora_rank, alpha=f.lora_alpha, dropout=f.lora_dropout, targets=tuple(f.lora_targets))


def save_peft_adapter(model_args: dict, adapters: dict, config: FoundryConfig, checkpoint_dir: Path) -> None:
    """The adapters in PEFT's format too (`PEFT_ADAPTER`/), for the HF export of the base; adapter.pt stays."""
    from foundry.export.layout import UnsupportedArchitecture
    from foundry.export.peft import PEFT_ADAPTER, write_peft_adapter

    try:
        write_peft_adapter(model_args, adapters, lora_spec(config), checkpoint_dir / PEFT_ADAPTER)
    except UnsupportedArchitecture as e:  # a base no export maps: the merged model and adapter.pt are what it has
        log.warning("adapters not written in PEFT's format: %s", e)
