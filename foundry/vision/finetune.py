"""Fine-tuning a registered image classifier on new labelled images: the pure parts.

The base's classes keep their indices and labels it lacks are appended (`merged_classes`: what the prepared
dataset's `shards.json` lists, so the base's head rows still mean the same labels); the warm start grows the
classifier head by one fresh row per new class and keeps every old row as it was (`warm_start_state`), so the
grown model gives the base's logits for the base's classes until training moves them.
"""

from __future__ import annotations

import math

import torch

from foundry.config import FoundryConfig
from foundry.vision.config import image_data

HEAD = ("net.head.weight", "net.head.bias")  # the linear head of both architectures (models.vision)


def grown_head(state_dict: dict, classes: int, seed: int = 0) -> dict:
    """`state_dict` with its head grown to `classes` rows: the old rows and biases unchanged, new rows drawn as
    `nn.Linear` draws them (uniform in +-1/sqrt(fan_in), seeded), new biases 0."""
    weight, bias = (state_dict[key] for key in HEAD)
    old, fan_in = weight.shape
    if classes < old:
        raise ValueError(f"a head of {old} classes cannot shrink to {classes}: a fine-tune only adds classes")
    generator = torch.Generator().manual_seed(seed)
    bound = 1 / math.sqrt(fan_in)
    fresh = (torch.rand(classes - old, fan_in, generator=generator) * 2 - 1) * bound
    grown = dict(state_dict)
    grown[HEAD[0]] = torch.cat([weight, fresh.to(weight.dtype)])
    grown[HEAD[1]] = torch.cat([bias, torch.zeros(classes - old, dtype=bias.dtype)])
    return grown


def warm_start_state(parent: dict, classes: list[str], seed: int = 0) -> dict:
    """The parent's weights (a saved `model.pt` dict) for a classifier of `classes`, which must begin with the
    parent's classes in their order; the head grown for the rest."""
    before = list(parent.get("classes") or [])
    if before and classes[: len(before)] != before:
        raise ValueError(
            f"the data's classes {classes[:10]} do not begin with the base's {before[:10]}: prepare the data with "
            "the base's classes first (`merged_classes`), so each head row keeps its label"
        )
    return grown_head(parent["state_dict"], len(classes), seed)


# What fixes the shape of the base's weights or of its inputs (and the ledger's hashes its data builds on): a
# fine-tune keeps these as the base has them. Every other key of `image` and `vision` is the run's where the run
# sets it (augmentation, dropout, near duplicates, shards, the class checks).
KEPT = {
    "image": ("size", "channels", "hash_size"),
    "vision": ("arch", "widths", "blocks_per_stage", "patch_size", "n_layer", "n_head", "n_embd", "pooling"),
}


def _section(recorded: dict, given: dict, default: dict, name: str) -> dict:
    """The base's `name` section with the keys this run changed from the defaults in place; a changed key of
    `KEPT` that differs from the base's is an error naming it."""
    base = {**default, **recorded.get(name, {})}
    changed = {key: value for key, value in given.items() if value != default.get(key)}
    for key in KEPT[name]:
        if key in changed and changed[key] != base[key]:
            raise ValueError(
                f"{name}.{key} is {base[key]!r} in the base model and {changed[key]!r} here: a fine-tune keeps its "
                f"base's {'input' if name == 'image' else 'architecture'}; drop the {name}.{key} setting"
            )
    return {**base, **changed}


def image_sections(config: FoundryConfig, recorded: dict) -> dict:
    """The sections a warm start of `config` from an image base (`FoundryConfig.warm_started_from`) takes in place
    of its own: `data.modality` image, and the base's `image` and `vision` sections (`recorded`) with the run's
    own settings where it changed them from the defaults. The GPT's `model` and `tokenizer` sections stay the
    run's: an image base has neither."""
    default, given = FoundryConfig().model_dump(mode="json"), config.model_dump(mode="json")
    kept = {name: _section(recorded, given[name], default[name], name) for name in ("image", "vision")}
    return {
        "model": config.model,
        "tokenizer": config.tokenizer,
        "data": image_data(config.data),
        **kept,
    }
