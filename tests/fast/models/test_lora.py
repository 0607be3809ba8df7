"""models/lora.py: adapters train alone, fold into the weights exactly, and count what they train."""

from __future__ import annotations

import pytest
import torch

from models.gpt import GPT, GPTConfig
from models.lora import LoRALinear, LoRASpec, adapter_state_dict, add_lora, merge_lora, trainable_share

V, BLOCK = 64, 16
ARGS = dict(vocab_size=V, block_size=BLOCK, n_layer=2, n_head=2, n_embd=32)


def tiny() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**ARGS))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.randint(0, V, (2, BLOCK), generator=torch.Generator().manual_seed(1))
    return idx, torch.roll(idx, -1, dims=1)


def nonzero_adapters(model: GPT) -> None:
    """B starts at zero (the adapted model starts as the base); give it values so the update shows."""
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoRALinear):
                module.lora_b.copy_(0.05 * torch.randn(module.lora_b.shape, generator=generator))


def test_only_adapter_parameters_receive_gradients_and_change():
    model = tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wrapped = add_lora(model, LoRASpec(rank=4, alpha=8))
    assert len(wrapped) == 4 * ARGS["n_layer"]
    optimizer = torch.optim.AdamW(model.optimizer_groups(0.1), lr=1e-2)
    for _ in range(2):  # the first step moves B off zero, after which A gets a gradient too
        optimizer.zero_grad()
        model(*batch())[1].backward()
        optimizer.step()
    for name, param in model.named_parameters():
        is_adapter = name.endswith(("lora_a", "lora_b"))
        assert param.requires_grad == is_adapter, name
        assert (param.grad is not None and bool(param.grad.abs().sum() > 0)) == is_adapter, name
    for key, value in model.state_dict().items():
        if "lora_" not in key:
            assert torch.equal(value, before[key.replace(".base.", ".")]), f"frozen {key} changed"


def test_an_adapter_starts_as_the_identity_update():
    model = tiny()
    idx, _ = batch()
    reference = model(idx)[0]
    add_lora(model, LoRASpec(rank=4))
    torch.testing.assert_close(model(idx)[0], reference, rtol=0, atol=0)


def test_merged_weights_give_the_logits_of_base_plus_adapter():
    model = tiny().eval()
    add_lora(model, LoRASpec(rank=4, alpha=8, dropout=0.1))
    nonzero_adapters(model)
    idx, _ = batch()
    adapted = model(idx)[0]
    merge_lora(model)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    torch.testing.assert_close(model(idx)[0], adapted, rtol=1e-5, atol=1e-5)
    # Its state dict is the base architecture's again: a plain GPT loads it and serves the same logits.
    served = GPT(GPTConfig(**ARGS)).eval()
    served.load_state_dict(model.state_dict())
    torch.testing.assert_close(served(idx)[0], adapted, rtol=1e-5, atol=1e-5)
    assert all(p.requires_grad for p in model.parameters())


def test_trainable_share_counts_rank_times_in_plus_out():
    model = tiny()
    total_before = trainable_share(model)[1]
    rank, width = 4, ARGS["n_embd"]
    add_lora(model, LoRASpec(rank=rank))
    # qkv (width -> 3 width), attn.proj (width -> width), fc (width -> 4 width), mlp.proj (4 width -> width)
    per_block = rank * ((width + 3 * width) + (width + width) + (width + 4 * width) + (4 * width + width))
    trainable, total = trainable_share(model)
    assert trainable == ARGS["n_layer"] * per_block == 4096
    assert total == total_before + trainable  # the tied embedding counts once


def test_targets_choose_the_modules_and_a_typo_is_refused():
    model = tiny()
    wrapped = add_lora(model, LoRASpec(rank=2, targets=("attn.qkv",)))
    assert wrapped == ["blocks.0.attn.qkv", "blocks.1.attn.qkv"]
    assert set(adapter_state_dict(model)) == {f"{name}.lora_{ab}" for name in wrapped for ab in "ab"}
    with pytest.raises(ValueError, match=r"LoRA target 'attn.qvk' matches no linear module.*'attn.qkv'"):
        add_lora(tiny(), LoRASpec(targets=("attn.qvk",)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"rank": 0}, "rank must be at least 1"), ({"dropout": 1.0}, "dropout must be in"), ({"targets": ()}, "target")],
)
def test_spec_refuses_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LoRASpec(**kwargs)
