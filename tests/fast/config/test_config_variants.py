"""A config derived by a typed method (`foundry.config.variants`) is exactly the config the edited dict it replaced
gave: each test builds both, the dict the way the code did before the methods, on the tiny configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT

from foundry.align.start import align_config
from foundry.config import ConfigError, FoundryConfig, load_config, validate, variants
from foundry.core import workload
from foundry.core.contracts import ParentModel, SourceManifest
from foundry.core.model_uri import ModelUri
from foundry.specialists.finetune import specialist_config
from foundry.vision.config import IMAGE_EXTENSIONS, INDEX_EXTENSIONS, fetching_images, image_data, reading_images
from foundry.vision.finetune import image_sections


def same(new: FoundryConfig, old: FoundryConfig) -> None:
    assert new == old
    assert new.model_dump() == old.model_dump() and new.flat() == old.flat()


def edited(config: FoundryConfig, **sections: dict[str, Any]) -> FoundryConfig:
    raw = config.model_dump()
    for name, keys in sections.items():
        raw[name].update(keys)
    return validate(raw)


def warm_dict(config: FoundryConfig, parent: ParentModel, train) -> dict[str, Any]:
    raw = config.model_dump(mode="json")
    raw["model"] = parent.config["model"]
    raw["tokenizer"] = {**parent.config["tokenizer"], "from_file": parent.tokenizer}
    raw["train"] = {**train.model_dump(mode="json"), "init_from": parent.weights}
    return raw


def parent_of(recorded: FoundryConfig, tokenizer: str = "tok.json") -> ParentModel:
    manifest = SourceManifest(source="s", digest="d", files=0, bytes=0, entries=[])
    return ParentModel(
        uri="models:/p/1",
        weights="model.pt",
        tokenizer=tokenizer,
        config=recorded.model_dump(mode="json"),
        source_manifest=manifest,
    )


@pytest.fixture
def vision_tiny() -> FoundryConfig:
    return load_config(REPO_ROOT / "configs" / "vision-tiny.yaml")


def test_reading_a_source_is_the_edited_data_section(tiny_config):
    same(tiny_config.reading("/data/tickets"), edited(tiny_config, data={"source": "/data/tickets", "sources": []}))
    settings = {"source": "sklearn://digits", "sources": [], "modality": "image"}
    same(tiny_config.reading("sklearn://digits", modality="image"), edited(tiny_config, data=settings))


def test_keys_of_several_sections_are_the_edited_sections(tiny_config, vision_tiny):
    chats = {"tokenizer": {"from_file": "/t/tokenizer.json"}, "align": {"method": "sft"}, "model": {"block_size": 32}}
    same(tiny_config.with_keys(**chats), edited(tiny_config, **chats))
    images = {"data": {"modality": "image"}, "image": {"size": 8, "channels": "gray", "mode": "resize"}}
    same(vision_tiny.with_keys(**images), edited(vision_tiny, **images))


def test_a_trials_values_are_the_edited_keys(tiny_config):
    params = {"train.learning_rate": 0.002, "model.n_layer": 3, "train.max_steps": 7}
    raw = tiny_config.model_dump(mode="json")
    for key, value in params.items():
        section, _, name = key.partition(".")
        raw[section][name] = value
    same(tiny_config.with_keys(train={"learning_rate": 0.002, "max_steps": 7}, model={"n_layer": 3}), validate(raw))


def test_an_alignments_warm_start_is_the_edited_dict(tiny_config):
    parent = parent_of(FoundryConfig())
    train = tiny_config.training_for("align")
    raw = warm_dict(tiny_config, parent, train)
    raw["registry"]["model_name"] = tiny_config.align.model_name
    registry = tiny_config.registry.model_copy(update={"model_name": tiny_config.align.model_name})
    same(tiny_config.warm_started_from(parent, train, registry=registry), validate(raw))


def test_a_text_retrains_warm_start_is_the_edited_dict(tiny_config):
    parent = parent_of(tiny_config)
    train = tiny_config.training_for("retrain")
    same(tiny_config.warm_started_from(parent, train), validate(warm_dict(tiny_config, parent, train)))


def test_an_image_bases_warm_start_is_the_edited_dict(vision_tiny, tmp_path):
    given = load_config(None, [f"data.source={tmp_path}", "vision.crop_padding=0", "image.min_per_class=4"])
    parent = parent_of(vision_tiny, tokenizer="")
    train = given.training_for("finetune")
    raw, values = warm_dict(given, parent, train), given.model_dump(mode="json")
    old = {**raw, "model": values["model"], "tokenizer": values["tokenizer"]}
    old["data"] = {**raw["data"], "modality": "image"}
    default = FoundryConfig().model_dump(mode="json")
    for name in ("image", "vision"):
        old[name] = {**default[name], **parent.config[name]} | {
            k: v for k, v in values[name].items() if v != default[name][k]
        }
    same(given.warm_started_from(parent, train, **image_sections(given, parent.config)), validate(old))


def test_a_variant_that_does_not_validate_is_refused_as_the_dict_was(tiny_config):
    with pytest.raises(ConfigError) as new:
        tiny_config.with_keys(model={"n_head": 5})
    with pytest.raises(ConfigError) as old:
        edited(tiny_config, model={"n_head": 5})
    assert str(new.value) == str(old.value)


def test_registering_as_another_name_is_the_edited_registry_section(tiny_config, vision_tiny):
    for config in (tiny_config, vision_tiny):
        renamed = config.registering_as("foundry-gpt-contracts")
        same(renamed, edited(config, registry={"model_name": "foundry-gpt-contracts"}))
        assert renamed.registry.model_name == "foundry-gpt-contracts" and renamed.data == config.data


def test_accumulating_is_the_edited_train_section_and_the_model_copy_it_replaced(tiny_config):
    """A resume at another world size keeps its global batch by accumulating (`foundry.checkpointing.world`)."""
    accumulated = tiny_config.accumulating(4)
    same(accumulated, edited(tiny_config, train={"grad_accum_steps": 4}))
    copied = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(update={"grad_accum_steps": 4})})
    same(accumulated, copied)
    with pytest.raises(ConfigError, match="grad_accum_steps"):
        tiny_config.accumulating(0)


def test_registering_as_a_name_the_registry_refuses_is_a_config_error(tiny_config):
    with pytest.raises(ConfigError, match="model_name"):
        tiny_config.registering_as("a/b")


def test_an_alignments_config_is_the_old_registry_copy_warm_started(tiny_config):
    parent = parent_of(FoundryConfig())
    registry = tiny_config.registry.model_copy(update={"model_name": tiny_config.align.model_name})
    old = tiny_config.warm_started_from(parent, tiny_config.training_for("align"), registry=registry)
    same(align_config(tiny_config, parent), old)
    assert old.registry.model_name == tiny_config.align.model_name != tiny_config.registry.model_name


def old_specialist_config(config: FoundryConfig, parent: ParentModel, base: str) -> FoundryConfig:
    kept = workload.named(base).finetune_sections(config, parent)
    name = config.finetune.resolved_model_name(ModelUri.parse(parent.uri).name, config.data.source_list[0])
    registry = config.registry.model_copy(update={"model_name": name})
    return config.warm_started_from(parent, config.training_for("finetune"), **kept, registry=registry)


def test_a_specialists_config_is_the_old_registry_copy_warm_started(tiny_config, vision_tiny, tmp_path):
    text = parent_of(tiny_config)
    same(specialist_config(tiny_config, text), old_specialist_config(tiny_config, text, "text"))
    given = load_config(None, [f"data.source={tmp_path}", "vision.crop_padding=0", "image.min_per_class=4"])
    image = parent_of(vision_tiny, tokenizer="")
    new = specialist_config(given, image)
    same(new, old_specialist_config(given, image, "image"))
    assert new.data.modality == "image" and new.registry.model_name != given.registry.model_name


def test_the_data_sections_image_variants_are_the_old_copies_validated(tiny_config, tmp_path):
    data = tiny_config.reading(str(tmp_path)).data
    assert image_data(data) == data.model_copy(update={"modality": "image"})
    fetched = data.model_copy(update={"extensions": [*IMAGE_EXTENSIONS, *INDEX_EXTENSIONS]})
    assert fetching_images(data) == fetched and fetched.extensions != data.extensions
    with pytest.raises(ConfigError, match="stdlib:// is text"):  # the copy took it; the variant checks it
        image_data(tiny_config.reading("stdlib://shakespeare").data)


def test_a_start_rebuilt_from_a_parent_is_the_edited_dict(tiny_config):
    """A reproduced aligned version's start (flows/reproduce.py), as the edit it replaced set it."""
    start = parent_of(tiny_config, tokenizer="/home/chat-base/tokenizer.json")
    old = edited(tiny_config, train={"init_from": start.weights}, tokenizer={"from_file": start.tokenizer})
    same(tiny_config.initialised_from(start), old)
    assert old.train.init_from == "model.pt" and old.train.init_from != tiny_config.train.init_from


def test_the_scoring_variants_are_the_edited_sections(tiny_config, vision_tiny):
    same(
        tiny_config.tokenizer_from(Path("/m/tokenizer.json")),
        edited(tiny_config, tokenizer={"from_file": "/m/tokenizer.json"}),
    )
    chats = {"tokenizer": {"from_file": "/m/tokenizer.json"}, "align": {"method": "sft"}, "model": {"block_size": 32}}
    same(variants.preparing_chats_for(tiny_config, Path("/m/tokenizer.json"), 32), edited(tiny_config, **chats))
    fitted = {"size": 8, "channels": "gray", "mode": "resize"}
    images = {"data": {"modality": "image"}, "image": fitted}
    same(reading_images(vision_tiny, **fitted), edited(vision_tiny, **images))
