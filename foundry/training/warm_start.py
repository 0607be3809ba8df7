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


def specialist_config(config: FoundryConfig, parent: ParentModel) -> FoundryConfig:
    """A domain fine-tune of `parent`: its model shape and tokenizer, started from its weights, this config's
    data, `train` and `finetune` settings, registered under `finetune.model_name` (derived by default)."""
    raw = config.model_dump(mode="json")
    raw["model"] = parent.config["model"]
    raw["tokenizer"] = {**parent.config["tokenizer"], "from_file": parent.tokenizer}
    raw["train"]["init_from"] = parent.weights
    base_name = parent.uri.removeprefix("models:/").split("/")[0]
    raw["registry"]["model_name"] = config.finetune.resolved_model_name(base_name, config.data.source_list[0])
    return validate(raw)
