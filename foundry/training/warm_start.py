"""Runs that continue from a registered model rather than from random weights (retrain, fine-tune, chat tuning):
the parent's model shape and tokenizer, its weights as the start. A retrain's config is built here
(`retrain_config`); the fine-tune's and the chat tuning's in their own folders, with
`FoundryConfig.warm_started_from`. What a parent's weights must share with the run that starts from them is its
workload's (a text parent's: `foundry.pretrain.parent_weights`)."""

from __future__ import annotations

import logging
from typing import Literal

from foundry.config import FoundryConfig
from foundry.core.contracts import ParentModel
from foundry.core.workload import for_recorded

log = logging.getLogger(__name__)
RUN_OF = {"retrain": "a retrain", "finetune": "a fine-tune", "align": "an alignment"}


def warn_of_train_keys_not_taken(config: FoundryConfig, variant: Literal["retrain", "finetune", "align"]) -> None:
    """A `train` key set away from its default that the variant's recipe replaces (`train.weight_decay` against
    `retrain.train.weight_decay`...): say so, since one config file serves pretraining and its variants alike."""
    for key, value, own_key, own in config.train_keys_not_taken(variant):
        log.warning(
            "train.%s %s does not reach %s: it trains at %s %s (set that, or null to take train's)",
            key,
            value,
            RUN_OF[variant],
            own_key,
            own,
        )


def retrain_config(config: FoundryConfig, parent: ParentModel) -> FoundryConfig:
    """A retrain of the champion on this run's data, trained with `train` under `retrain.train`, keeping what the
    parent's workload fixes of its weights' and inputs' shape (`Workload.retrain_sections`: an image classifier's
    modality and image settings). The parent's workload is named by its recorded `data.modality`."""
    warn_of_train_keys_not_taken(config, "retrain")
    kept = for_recorded(parent.config).retrain_sections(config, parent.config)
    return config.warm_started_from(parent, config.training_for("retrain"), **kept)
