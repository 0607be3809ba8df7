"""Alignment's package defaults are each method's measured recipe (`align.sft_train`, `align.dpo_train`, replay a
quarter), a key set in `align.train` wins for either method, and the run's config shows the values it trains with."""

from __future__ import annotations

import pytest

from foundry.align.start import align_config
from foundry.config import FoundryConfig, as_recorded, load_config, to_yaml, validate
from foundry.core.contracts import ParentModel, SourceManifest

# (max_steps, learning_rate, warmup_steps, batch_size): bench/README.md's recipes
RECIPES = {"sft": (2500, 3e-3, 30, 32), "dpo": (200, 5e-5, 10, 32)}


def recipe(train) -> tuple:
    return (train.max_steps, train.learning_rate, train.warmup_steps, train.batch_size)


def tuned(config: FoundryConfig, tmp_path) -> FoundryConfig:
    """The config the align flow trains and records: `align_config` on a parent of the default shape."""
    parent = ParentModel(
        uri="models:/p/1",
        weights=str(tmp_path / "model.pt"),
        tokenizer=str(tmp_path / "tokenizer.json"),
        config=FoundryConfig().model_dump(mode="json"),
        source_manifest=SourceManifest(source="s", digest="d", files=0, bytes=0, entries=[]),
    )
    return align_config(config, parent)


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_with_nothing_set_each_method_trains_its_recipe_replaying_a_quarter(method, tmp_path):
    config = load_config(None, [f"align.method={method}"])
    assert recipe(config.training_for("align")) == RECIPES[method]
    assert config.align.replay_fraction == 0.25 and config.align.beta == 0.5  # beta: DPO's alone
    run = tuned(config, tmp_path)
    assert recipe(run.train) == RECIPES[method]
    # What MLflow's params and the recorded config show is what it trains with.
    flat = run.flat()
    assert (flat["train.max_steps"], flat["train.learning_rate"], flat["train.warmup_steps"]) == RECIPES[method][:3]
    assert flat["align.replay_fraction"] == 0.25
    assert recipe(validate(as_recorded(run.model_dump(mode="json"))).train) == RECIPES[method]


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_a_key_set_in_align_train_wins_for_either_method(method, tmp_path):
    given = [f"align.method={method}", "align.train.max_steps=30", "align.train.learning_rate=1e-3"]
    config = load_config(None, [*given, "align.replay_fraction=0", "align.sft_train.warmup_steps=3"])
    warmup = 3 if method == "sft" else 10  # a recipe's key applies to its own method only
    assert recipe(config.training_for("align")) == (30, 1e-3, warmup, 32)
    assert recipe(tuned(config, tmp_path).train) == (30, 1e-3, warmup, 32)
    assert config.align.replay_fraction == 0.0


def test_a_null_key_falls_through_the_recipe_to_train():
    config = load_config(None, ["align.method=dpo", "align.dpo_train.max_steps=null", "align.train.seed=4"])
    resolved = config.training_for("align")
    assert (resolved.max_steps, resolved.learning_rate, resolved.seed) == (config.train.max_steps, 5e-5, 4)


def test_the_defaults_written_out_keep_switching_method_to_the_other_recipe(tmp_path):
    """params.yaml and the Prefect form hold both recipes: a form or file from the sft default, switched to dpo,
    trains DPO's recipe, not SFT's values carried along."""
    path = tmp_path / "params.yaml"
    path.write_text(to_yaml(FoundryConfig()))
    assert recipe(load_config(path, ["align.method=dpo"]).training_for("align")) == RECIPES["dpo"]


def test_a_recipe_that_cannot_train_is_refused_whichever_method_is_chosen():
    # FSDP with Muon (train's optimizer, from random weights) is refused as one `train` section would be.
    with pytest.raises(ValueError, match="align.train over align.dpo_train with train: optimizer muon needs whole"):
        load_config(None, ["align.method=sft", "align.dpo_train.strategy=fsdp"])
    allowed = load_config(None, ["align.method=sft", "align.dpo_train.strategy=fsdp", "train.optimizer=adamw"])
    assert allowed.align.training(allowed.train, "dpo").strategy == "fsdp"


def test_a_version_aligned_before_loads_with_what_it_trained_with():
    """A config recorded before the recipes (the old code's dump of `align` for a dpo run: one set of defaults
    for both methods, no replay) reads back to the same training; one that predates replay replayed nothing."""
    recorded = FoundryConfig().model_dump(mode="json")
    old_train = {"max_steps": 600, "batch_size": 32, "learning_rate": 0.001, "warmup_steps": 30}
    recorded["align"] = {"method": "dpo", "model_name": "foundry-chat", "train": old_train, "beta": 0.1}
    recorded["align"] |= {"sft_weight": 1.0, "replay_fraction": 0.0, "max_new_tokens": 32}
    recorded["train"] |= {**old_train, "init_from": "/home/x/models/p/1/model.pt"}
    config = validate(as_recorded(recorded))
    assert recipe(config.training_for("align")) == recipe(config.train) == (600, 1e-3, 30, 32)
    assert config.align.replay_fraction == 0.0
    del recorded["align"]["replay_fraction"]
    assert validate(as_recorded(recorded)).align.replay_fraction == 0.0


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_a_null_align_train_key_recorded_before_the_recipes_still_means_trains_value(method):
    """Before the recipes a null key of `align.train` kept `train`'s value, not a recipe's (2,500 steps for sft)."""
    recorded = FoundryConfig().model_dump(mode="json")
    old_train = {"max_steps": None, "batch_size": 32, "learning_rate": None, "warmup_steps": 30}
    recorded["align"] = {"method": method, "model_name": "foundry-chat", "train": old_train, "replay_fraction": 0.0}
    recorded["train"] |= {"max_steps": 7, "learning_rate": 0.002, "warmup_steps": 30, "batch_size": 32}
    config = validate(as_recorded(recorded))
    assert recipe(config.training_for("align")) == (7, 0.002, 30, 32)
    assert "sft_train" not in recorded["align"]  # the record itself is left as it was
