"""A LoRA fine-tune's adapters in PEFT's format load with `PeftModel.from_pretrained` on the HF export of the base
and compute what Foundry's merged specialist computes (float32 logits within 1e-4), for GPT-2 and GPT-NeoX bases.
Tiny random-weight models, lora_b perturbed so the adapters change the outputs; no training."""

from __future__ import annotations

import json
import os

import pytest
import torch
from helpers_tokenizers import plain_tokenizer

from foundry.export.hf import write_hf
from foundry.export.layout import UnsupportedArchitecture, hf_module_name
from foundry.export.peft import ADAPTER_CONFIG, peft_config, write_peft_adapter
from models.gpt import GPT, GPTConfig, gpt_from_saved
from models.lora import LoRASpec, adapter_state_dict, add_lora, merge_lora

os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"  # never download


def _adapted(positions: str, spec: LoRASpec) -> tuple[dict, GPT]:
    """(the base as saved, the base with adapters whose B is random, so the update is not zero)."""
    torch.manual_seed(0)
    base = GPT(GPTConfig(300, block_size=32, n_layer=2, n_head=4, n_embd=32, positions=positions)).eval()
    saved = {"model_args": base.config.to_dict(), "state_dict": {k: v.clone() for k, v in base.state_dict().items()}}
    add_lora(base, spec)
    with torch.no_grad():
        for name, p in base.named_parameters():
            if name.endswith("lora_b"):
                p.normal_(0, 0.2)
    return saved, base


def _peft_logits(tmp_path, saved: dict, adapters: dict, spec: LoRASpec, ids: torch.Tensor) -> tuple:
    """(PEFT's logits, the base modules PEFT wrapped with an adapter)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    tokenizer = tmp_path / "tokenizer.json"
    plain_tokenizer().save(str(tokenizer))
    write_hf(saved, tokenizer, tmp_path / "base")
    write_peft_adapter(saved["model_args"], adapters, spec, tmp_path / "adapter")
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base", dtype=torch.float32)
    model = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    wrapped = {name.removeprefix("base_model.model.") for name, m in model.named_modules() if hasattr(m, "lora_A")}
    with torch.no_grad():
        return model(ids).logits, wrapped


@pytest.mark.parametrize("positions", ["learned", "rotary"])
@pytest.mark.parametrize(
    "targets",
    [("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"), ("attn.qkv", "mlp.proj"), ("blocks.0.attn.qkv",)],
    ids=["all", "some", "one-layer"],
)
def test_peft_adapter_on_exported_base_matches_merged_specialist(tmp_path, positions, targets):
    spec = LoRASpec(rank=4, alpha=8.0, dropout=0.1, targets=targets)
    saved, adapted = _adapted(positions, spec)
    adapters = adapter_state_dict(adapted)
    ids = torch.randint(0, 300, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        merged, _ = merge_lora(adapted).eval()(ids)
        base, _ = gpt_from_saved(saved)(ids)
    peft, wrapped = _peft_logits(tmp_path, saved, adapters, spec, ids)
    assert (merged - base).abs().max() > 1e-2  # the adapters change the outputs
    assert (peft - merged).abs().max() < 1e-4
    # PEFT adapts those modules and no others (a module it adapts without weights starts at zero: same logits)
    assert wrapped == {hf_module_name(key.rpartition(".")[0], saved["model_args"]) for key in adapters}


def test_targets_name_only_the_adapted_projections(tmp_path):
    """Full paths: PEFT adapts every module whose path ends in a target, so `attn.c_proj` would also adapt a layer
    Foundry left alone, and `c_proj` GPT-2's MLP projections too."""
    spec = LoRASpec(rank=2, alpha=2.0, targets=("blocks.1.attn.proj",))
    saved, adapted = _adapted("learned", spec)
    write_peft_adapter(saved["model_args"], adapter_state_dict(adapted), spec, tmp_path)
    config = json.loads((tmp_path / ADAPTER_CONFIG).read_text())
    assert (config["target_modules"], config["fan_in_fan_out"], config["r"], config["lora_alpha"]) == (
        ["transformer.h.1.attn.c_proj"],
        True,
        2,
        2.0,
    )


@pytest.mark.parametrize("parent", ["models:/foundry-gpt/3", None])
def test_the_base_is_named_when_the_caller_knows_it(parent):
    spec = LoRASpec(rank=2, targets=("attn.qkv",))
    saved, adapted = _adapted("rotary", spec)
    config = peft_config(saved["model_args"], adapter_state_dict(adapted), spec, parent)
    assert config["base_model_name_or_path"] == parent


def test_unmappable_base_is_refused_before_writing(tmp_path):
    spec = LoRASpec(rank=2)
    saved, adapted = _adapted("learned", spec)
    with pytest.raises(UnsupportedArchitecture, match="alibi"):
        write_peft_adapter({**saved["model_args"], "positions": "alibi"}, adapter_state_dict(adapted), spec, tmp_path)
    assert not list(tmp_path.iterdir())
