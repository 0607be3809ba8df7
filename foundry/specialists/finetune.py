"""A domain fine-tune's config: a registered version's model shape and tokenizer, started from its weights."""

from __future__ import annotations

from foundry.config import FoundryConfig, validate
from foundry.contracts import ParentModel
from foundry.model_uri import ModelUri
from foundry.training.warm_start import warm_started


def specialist_config(config: FoundryConfig, parent: ParentModel) -> FoundryConfig:
    """A domain fine-tune of `parent`: its model shape and tokenizer, started from its weights, this config's
    data, `train` and `finetune` settings, registered under `finetune.model_name` (derived by default)."""
    raw = warm_started(config, parent, config.train)
    base_name = ModelUri.parse(parent.uri).name
    raw["registry"]["model_name"] = config.finetune.resolved_model_name(base_name, config.data.source_list[0])
    return validate(raw)
