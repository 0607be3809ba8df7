"""Fine-tuning a registered image classifier on new labelled images: the pure parts.

The base's classes keep their indices and labels it lacks are appended (`merged_classes`: what the prepared
dataset's `shards.json` lists, so the base's head rows still mean the same labels); the warm start grows the
classifier head by one fresh row per new class and keeps every old row as it was (`warm_start_state`), so the
grown model gives the base's logits for the base's classes until training moves them.
"""

from __future__ import annotations

import math

import torch

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
