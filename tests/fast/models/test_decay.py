"""models/decay.py: weight decay chosen by shape when a model is built, found by name once FSDP has flattened it.

The flattening is simulated as FSDP with `use_orig_params` (Lightning's setting) leaves a model for
`configure_optimizers`: each wrapped unit under `_fsdp_wrapped_module`, every parameter a 1-D view.
Under real FSDP on two CPU ranks (the decayed group in a checkpoint): tests/slow/vision/test_vision_fsdp.py."""

from __future__ import annotations

import torch
import torch.nn as nn

from models.gpt import GPT, GPTConfig
from models.gpt import Block as TextBlock
from models.lora import LoRASpec, add_lora
from models.vision import Block as VisionBlock
from models.vision import ImageClassifier, VisionConfig


class Wrapped(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        self._fsdp_wrapped_module = module


def flattened_like_fsdp(model: nn.Module, unit: type[nn.Module]) -> nn.Module:
    """`model` with every `unit` wrapped and every parameter replaced by a flat copy (tied ones stay tied)."""
    for name in [n for n, m in model.named_modules() if isinstance(m, unit)]:
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, child, Wrapped(owner.get_submodule(child)))
    flat: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            flat.setdefault(id(p), nn.Parameter(p.detach().flatten(), requires_grad=p.requires_grad))
            setattr(module, name, flat[id(p)])
    return model


def decayed_names(model: nn.Module, weight_decay: float = 0.1) -> list[str]:
    """Names of the decayed group, FSDP's wrapper parts left out."""
    decay, no_decay = model.optimizer_groups(weight_decay)
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (weight_decay, 0.0)
    names = {id(p): n.replace("._fsdp_wrapped_module", "") for n, p in model.named_parameters()}
    return [names[id(p)] for p in decay["params"]]


def gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32))


def test_a_built_gpt_decays_its_matrices_in_parameter_order_and_nothing_else():
    model = gpt()
    by_shape = [n for n, p in model.named_parameters() if p.dim() >= 2]
    assert decayed_names(model) == by_shape and "wte.weight" in by_shape and "wpe.weight" in by_shape
    decay, no_decay = model.optimizer_groups(0.1)
    assert sorted(id(p) for p in decay["params"] + no_decay["params"]) == sorted(id(p) for p in model.parameters())


def test_a_flattened_gpt_still_decays_its_matrices():
    by_shape = [n for n, p in gpt().named_parameters() if p.dim() >= 2]
    model = flattened_like_fsdp(gpt(), TextBlock)
    assert all(p.dim() == 1 for p in model.parameters())  # a rule on p.dim() would decay nothing
    assert "blocks.0._fsdp_wrapped_module.attn.qkv.weight" in dict(model.named_parameters())
    assert decayed_names(model) == by_shape


def test_lora_adapters_decay_when_flattened_too():
    model = gpt()
    add_lora(model, LoRASpec(rank=2, targets=("attn.qkv",)))
    flattened_like_fsdp(model, TextBlock)
    assert decayed_names(model) == [f"blocks.{i}.attn.qkv.{w}" for i in range(2) for w in ("lora_a", "lora_b")]


def test_a_flattened_vit_decays_its_matrices_and_class_token_but_not_its_positions():
    model = ImageClassifier(VisionConfig(num_classes=3, arch="vit", image_size=8, n_layer=1, n_embd=16))
    by_shape = [n for n, p in model.named_parameters() if p.dim() >= 2 and n != "net.pos"]
    assert decayed_names(model) == by_shape and "net.cls" in by_shape
    assert decayed_names(flattened_like_fsdp(model, VisionBlock)) == by_shape
