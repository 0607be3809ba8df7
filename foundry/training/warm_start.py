"""Training that continues from a registered model rather than from random weights."""

from __future__ import annotations

from foundry.config import FoundryConfig, validate
from foundry.contracts import ParentModel


def fine_tune_config(config: FoundryConfig, parent: ParentModel) -> FoundryConfig:
    """This run's data settings with the parent's model shape and tokenizer, started from its weights."""
    raw = config.model_dump(mode="json")
    raw["model"] = parent.config["model"]
    raw["tokenizer"] = {**parent.config["tokenizer"], "from_file": parent.tokenizer}
    r = config.retrain
    raw["train"].update(
        init_from=parent.weights, max_steps=r.max_steps, learning_rate=r.learning_rate, warmup_steps=r.warmup_steps
    )
    return validate(raw)
