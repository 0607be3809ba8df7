"""Configs derived from a config: another source, another registered name, a warm start from a registered version,
a search trial's values.

Each is the config with some sections (or some of their keys) changed and validated again as a whole, as a loaded
file is: a section's own checks (a source's allow-lists) and the checks across sections (the search space, a ViT's
patches) judge the new values, with the same messages (`ConfigError`). `FoundryConfig`'s methods of the same names
are the way in; the functions here take the config first. A variant one feature alone asks for (preparing chats
for one) is called here; one of the `data` section alone (`of_modality`, `fetching`) takes and gives that section,
validated as the section. The image workload's own variants are in `foundry.vision.config`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from pathlib import Path

    from foundry.config import FoundryConfig
    from foundry.config.data import DataConfig
    from foundry.config.training import TrainConfig
    from foundry.core.contracts import ParentModel


def with_sections(config: FoundryConfig, **sections: BaseModel | dict[str, Any]) -> FoundryConfig:
    """`config` with whole sections in place of its own: typed sections (`config.data.model_copy(update=...)`)
    or recorded values (a parent's `model` section as it was logged), validated as a whole."""
    from foundry.config import validate

    raw = config.model_dump(mode="json")
    for name, section in sections.items():
        raw[name] = section.model_dump(mode="json") if isinstance(section, BaseModel) else section
    return validate(raw)


def with_keys(config: FoundryConfig, **sections: dict[str, Any]) -> FoundryConfig:
    """`config` with the given keys of each named section set (`with_keys(train={"max_steps": 9})`), the section's
    other keys kept, validated as a whole."""
    from foundry.config import validate

    raw = config.model_dump(mode="json")
    for name, keys in sections.items():
        raw[name] = {**raw[name], **keys}
    return validate(raw)


def reading(config: FoundryConfig, source: str, **data: Any) -> FoundryConfig:
    """`config` reading `source` (alone: `data.sources` emptied), with any other `data` keys given."""
    return with_keys(config, data={"source": source, "sources": [], **data})


def registering_as(config: FoundryConfig, name: str) -> FoundryConfig:
    """`config` registering its versions as `name` (`registry.model_name`), validated as a whole."""
    return with_keys(config, registry={"model_name": name})


def accumulating(config: FoundryConfig, steps: int) -> FoundryConfig:
    """`config` accumulating gradients over `steps` micro-batches (`train.grad_accum_steps`), validated as a whole."""
    return with_keys(config, train={"grad_accum_steps": steps})


def tokenizer_from(config: FoundryConfig, path: str | Path) -> FoundryConfig:
    """`config` tokenizing with the tokenizer file at `path` (`tokenizer.from_file`), validated as a whole."""
    return with_keys(config, tokenizer={"from_file": str(path)})


def initialised_from(config: FoundryConfig, parent: ParentModel) -> FoundryConfig:
    """`config` starting from `parent`'s weights (`train.init_from`) and tokenizing with its tokenizer
    (`tokenizer.from_file`), its own model and training settings kept (where `warm_started_from` takes the
    parent's model shape), validated as a whole."""
    return with_keys(config, train={"init_from": parent.weights}, tokenizer={"from_file": parent.tokenizer})


def preparing_chats_for(config: FoundryConfig, tokenizer: str | Path, block_size: int) -> FoundryConfig:
    """`config` preparing chat records as an aligned model with this tokenizer and context reads them: one
    response a record (sft's preparation), whichever method the config aligns with."""
    return with_keys(
        config, tokenizer={"from_file": str(tokenizer)}, align={"method": "sft"}, model={"block_size": block_size}
    )


def of_modality(data: DataConfig, modality: str) -> DataConfig:
    """The `data` section reading data of `modality` (a workload's own: `foundry.vision.config.image_data`), its
    other keys kept."""
    return _data_with(data, modality=modality)


def fetching(data: DataConfig, extensions: list[str]) -> DataConfig:
    """The `data` section fetching the files of `extensions` (a workload's own files: an image source's listing
    fetches its images and the index files that label them, `foundry.vision.config.fetching_images`)."""
    return _data_with(data, extensions=extensions)


def _data_with(data: DataConfig, **keys: Any) -> DataConfig:
    # Validated as the section, with the message a whole config's `data` keys give (`ConfigError`).
    from foundry.config import ConfigError, _describe

    raw = {**data.model_dump(mode="json"), **keys}
    try:
        return type(data).model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe({**e, "loc": ("data", *e["loc"])}, {"data": raw}) for e in exc.errors())
        raise ConfigError(f"invalid config: {problems}") from None


def warm_started_from(
    config: FoundryConfig, parent: ParentModel, train: TrainConfig, **sections: BaseModel | dict[str, Any]
) -> FoundryConfig:
    """`config` with the parent's model shape and tokenizer, trained with `train` from its weights; `sections`:
    whole sections in place of those (what the parent's workload keeps of its own, the registry a run names)."""
    warm = {
        "model": parent.config["model"],
        "tokenizer": {**parent.config["tokenizer"], "from_file": parent.tokenizer},
        "train": train.model_copy(update={"init_from": parent.weights}),
    }
    return with_sections(config, **{**warm, **sections})
