"""A LoRA fine-tune's adapters in PEFT's format, for the base exported by `foundry.export.hf`.

`adapter_config.json` + `adapter_model.safetensors`, which `peft.PeftModel.from_pretrained(base, folder)` loads
on `AutoModelForCausalLM.from_pretrained(<the HF export of the base>)`. Written without PEFT (Foundry never
imports it): the config is PEFT's `LoraConfig` as JSON, the weights are PEFT's saved keys,
`base_model.model.<transformers module>.lora_{A,B}.weight`. Foundry's A (rank, in) and B (out, rank) are PEFT's
lora_A and lora_B as they are, GPT-2's Conv1D included (PEFT builds those from the (in, out) weight's shape and
only transposes when merging: `fan_in_fan_out`); GPT-NeoX's fused qkv reorders B's rows as the base's
(`layout.qkv_rows`). Same scale alpha / r (no rsLoRA), same dropout.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from foundry.export.layout import UnsupportedArchitecture, hf_module_name, qkv_rows, target
from models.lora import LoRASpec

PEFT_ADAPTER = "peft-adapter"  # the folder beside a LoRA fine-tune's adapter.pt; logged with it under adapter/
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PREFIX = "base_model.model."  # PeftModelForCausalLM's path to the wrapped model


def _pairs(adapter_state: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Foundry module -> (A, B) from `models.lora.adapter_state_dict`'s `<module>.lora_a` / `.lora_b`."""
    modules = {key.rpartition(".")[0] for key in adapter_state}
    pairs = {}
    for module in sorted(modules):
        a, b = adapter_state.get(f"{module}.lora_a"), adapter_state.get(f"{module}.lora_b")
        if a is None or b is None:
            raise UnsupportedArchitecture(f"adapter of {module} lacks lora_a or lora_b")
        pairs[module] = (a, b)
    return pairs


def peft_tensors(model_args: dict, adapter_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """PEFT's saved adapter weights (float32, contiguous) for the exported base's module names."""
    out = {}
    for module, (a, b) in _pairs(adapter_state).items():
        if module.endswith("attn.qkv"):
            b = qkv_rows(model_args, b.detach())
        name = _PREFIX + hf_module_name(module, model_args)
        out[f"{name}.lora_A.weight"] = a.detach().to(torch.float32).contiguous().clone()
        out[f"{name}.lora_B.weight"] = b.detach().to(torch.float32).contiguous().clone()
    return out


def peft_config(
    model_args: dict, adapter_state: dict[str, torch.Tensor], spec: LoRASpec, base_model: str | None = None
) -> dict:
    """PEFT's `adapter_config.json`. Targets are the adapted modules' full paths in the exported base: PEFT
    adapts every module whose path ends in a target, so a suffix (`attn.c_attn`) would adapt every layer where
    Foundry adapted one (`blocks.0.attn.qkv`). `base_model`: the registered version the adapters were trained
    on (`models:/NAME/N`), when the caller knows it; PEFT only records it."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": spec.rank,
        "lora_alpha": spec.alpha,
        "lora_dropout": spec.dropout,
        "target_modules": sorted(hf_module_name(m, model_args) for m in _pairs(adapter_state)),
        "fan_in_fan_out": target(model_args) == "gpt2",  # GPT-2's Conv1D stores weights (in, out)
        "bias": "none",
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "modules_to_save": None,
        "layers_to_transform": None,
    }


def write_peft_adapter(
    model_args: dict,
    adapter_state: dict[str, torch.Tensor],
    spec: LoRASpec,
    out_dir: Path,
    base_model: str | None = None,
) -> Path:
    """Write `adapter_config.json` and `adapter_model.safetensors` into `out_dir` (created); returns it.
    `adapter_state`: `models.lora.adapter_state_dict` of the adapted model (before or after merging);
    `base_model`: as `peft_config`'s."""
    from safetensors.torch import save_file

    tensors = peft_tensors(model_args, adapter_state)  # refuses an unmappable base before writing
    config = peft_config(model_args, adapter_state, spec, base_model)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    (out_dir / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return out_dir
