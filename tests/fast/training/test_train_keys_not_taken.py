"""A `train` key set away from its default that a retrain's, a fine-tune's or an alignment's recipe replaces is
named in a warning when that run's config is built; a key the variant's own section sets is the user's choice."""

from __future__ import annotations

import pytest

from foundry.align.start import align_config
from foundry.config import FoundryConfig, load_config
from foundry.core.contracts import ParentModel, SourceManifest
from foundry.training.warm_start import retrain_config

LOGGER = "foundry.training.warm_start"


def parent(tmp_path) -> ParentModel:
    return ParentModel(
        uri="models:/p/1",
        weights=str(tmp_path / "model.pt"),
        tokenizer=str(tmp_path / "tokenizer.json"),
        config=FoundryConfig().model_dump(mode="json"),
        source_manifest=SourceManifest(source="s", digest="d", files=0, bytes=0, entries=[]),
    )


def test_the_defaults_leave_nothing_out():
    config = FoundryConfig()
    assert [config.train_keys_not_taken(v) for v in ("retrain", "finetune", "align")] == [[], [], []]


def test_a_retrain_names_each_train_key_its_recipe_replaces(tmp_path, caplog):
    config = load_config(None, ["train.weight_decay=0.05", "train.max_steps=40", "train.batch_size=16"])
    assert config.train_keys_not_taken("retrain") == [
        ("max_steps", 40, "retrain.train.max_steps", 200),
        ("weight_decay", 0.05, "retrain.train.weight_decay", 0.1),
    ]  # batch_size: the recipe leaves it to train, which the retrain takes
    with caplog.at_level("WARNING", logger=LOGGER):
        retrained = retrain_config(config, parent(tmp_path))
    messages = [r.getMessage() for r in caplog.records]
    assert retrained.train.weight_decay == 0.1 and retrained.train.batch_size == 16
    assert messages == [
        "train.max_steps 40 does not reach a retrain: it trains at retrain.train.max_steps 200 (set that, or null "
        "to take train's)",
        "train.weight_decay 0.05 does not reach a retrain: it trains at retrain.train.weight_decay 0.1 (set that, "
        "or null to take train's)",
    ]


@pytest.mark.parametrize(
    "overrides",
    [
        ["train.weight_decay=0.05", "retrain.train.weight_decay=0.2"],  # the retrain's own, chosen
        ["train.weight_decay=0.05", "retrain.train.weight_decay=null"],  # train's, taken
        ["train.weight_decay=0.1"],  # the recipe's value: nothing is lost
    ],
)
def test_a_retrain_key_set_in_its_section_or_train_at_the_recipes_value_is_quiet(overrides, tmp_path, caplog):
    config = load_config(None, overrides)
    with caplog.at_level("WARNING", logger=LOGGER):
        retrain_config(config, parent(tmp_path))
    assert caplog.records == []


@pytest.mark.parametrize("method, steps", [("sft", 2500), ("dpo", 200)])
def test_an_alignment_names_the_methods_recipe_and_not_a_key_align_train_sets(method, steps, tmp_path, caplog):
    config = load_config(None, [f"align.method={method}", "train.weight_decay=0.05", "train.max_steps=40"])
    assert config.train_keys_not_taken("align") == [
        ("max_steps", 40, f"align.{method}_train.max_steps", steps),
        ("weight_decay", 0.05, f"align.{method}_train.weight_decay", 0.1),
    ]
    with caplog.at_level("WARNING", logger=LOGGER):
        align_config(config, parent(tmp_path))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "train.max_steps 40 does not reach an alignment",
        "train.weight_decay 0.05 does not reach an alignment",
    ]
    chosen = load_config(None, [f"align.method={method}", "train.weight_decay=0.05", "align.train.weight_decay=0.3"])
    assert chosen.train_keys_not_taken("align") == []


def test_a_variant_key_set_to_its_recipes_own_value_still_warns():
    """The value is all there is to go on: params.yaml writes every key out, so a key written at its recipe's value
    looks the same as one left alone."""
    config = load_config(None, ["train.weight_decay=0.05", "retrain.train.weight_decay=0.1"])
    assert config.train_keys_not_taken("retrain") == [("weight_decay", 0.05, "retrain.train.weight_decay", 0.1)]
    aligned = load_config(None, ["train.max_steps=40", "align.train.max_steps=2500"])  # align.train: a choice
    assert aligned.train_keys_not_taken("align") == []
    tuned = load_config(None, ["train.learning_rate=0.004", "finetune.train.learning_rate=0.002"])
    assert tuned.train_keys_not_taken("finetune") == []  # set away from the recipe's: a choice
