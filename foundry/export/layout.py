"""A Foundry model's weights in the layout of an architecture `transformers` ships: pure functions, no I/O.

Two mappings, checked against transformers 5.24's sources and by the parity tests (tests/fast/export/test_export_hf.py):
- learned positions -> GPT-2 (`GPT2LMHeadModel`). Same block (pre-norm, fused qkv as [q; k; v] over all heads,
  biases, LayerNorm eps 1e-5, tied head). GPT-2's projections are `Conv1D`, weight (in, out): transposed.
  Foundry's MLP uses `F.gelu`, the exact erf GELU: GPT-2's `activation_function="gelu"` (`GELUActivation`),
  not its default `gelu_new` (the tanh approximation).
- rotary -> GPT-NeoX (`GPTNeoXForCausalLM`) with `use_parallel_residual=False` (x + attn(ln1 x), then
  + mlp(ln2 x), as Foundry's block) and `partial_rotary_factor=1.0` (also written as transformers 4's
  `rotary_pct`). NeoX views its fused qkv output as
  (heads, 3 * head_dim): rows are [q_h; k_h; v_h] head by head, so Foundry's [q all heads; k; v] rows are
  reordered (`qkv_rows`). NeoX's `rotate_half` pairs dimension i with i + head_dim/2 (cos/sin repeated over both
  halves), as Foundry's `rotate` does (first half with second half), at base 10000 over head_dim.
Anything else (an unknown `positions`, a model-args key neither mapping knows, weights that are not the
architecture's) is refused with `UnsupportedArchitecture`: an export must compute what Foundry computes.
"""

from __future__ import annotations

import re

import torch

from models.gpt import GPTConfig

EOS = "<|endoftext|>"
# The GPTConfig fields the mappings below translate, written out: a field GPTConfig gains is refused until a
# mapping handles it (tests/fast/export/test_export_hf.py checks that these and OFF_ARGS are all of them, so adding one
# forces the choice).
# Dropout and mtp_weight are training settings: nothing to map.
KNOWN_ARGS = frozenset(
    {"vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "positions", "mtp_weight"}
)
# Fields that map only at the value that switches them off: neither architecture has a hashed bigram table,
# weightless QK-norm, a ReLU-squared MLP, value embeddings or heads predicting further ahead.
OFF_ARGS = {"bigram_buckets": 0, "qk_norm": False, "mlp_activation": "gelu", "value_embeddings": False, "mtp_depth": 0}
ROPE_BASE = 10000.0  # models.gpt.rotary_angles' default, which GPT.hidden uses


class UnsupportedArchitecture(ValueError):
    """A saved model no `transformers` architecture computes faithfully."""


def target(model_args: dict) -> str:
    """The transformers architecture a saved model maps onto ("gpt2" or "gpt_neox"), or UnsupportedArchitecture."""
    switched_on = sorted(k for k, off in OFF_ARGS.items() if model_args.get(k, off) != off)
    if switched_on:
        raise UnsupportedArchitecture(
            f"no architecture these exports write (GPT-2, GPT-NeoX) has what {switched_on} add to the model"
        )
    unknown = sorted(set(model_args) - KNOWN_ARGS - set(OFF_ARGS))
    if unknown:
        raise UnsupportedArchitecture(
            f"model args {unknown} are not ones this exporter maps (it knows {sorted(KNOWN_ARGS)}): "
            "the exported model would not compute what Foundry's does"
        )
    positions = model_args.get("positions", "learned")
    n_embd, n_head = model_args.get("n_embd", 192), model_args.get("n_head", 6)
    if n_embd % n_head:
        raise UnsupportedArchitecture(f"n_embd {n_embd} is not a multiple of n_head {n_head}")
    if positions == "learned":
        return "gpt2"
    if positions == "rotary":
        if (n_embd // n_head) % 2:
            raise UnsupportedArchitecture(f"rotary positions need an even head size, not {n_embd // n_head}")
        return "gpt_neox"
    raise UnsupportedArchitecture(f"positions {positions!r} have no transformers architecture to map onto")


def _args(model_args: dict) -> GPTConfig:
    target(model_args)
    return GPTConfig(**model_args)


def hf_config(model_args: dict, eos_token_id: int, bos_token_id: int | None = None) -> dict:
    """The `config.json` of the exported model (without transformers' own bookkeeping keys)."""
    cfg = _args(model_args)
    bos = eos_token_id if bos_token_id is None else bos_token_id
    common = {"vocab_size": cfg.vocab_size, "bos_token_id": bos, "eos_token_id": eos_token_id}
    common |= {"tie_word_embeddings": True, "torch_dtype": "float32", "use_cache": True}
    if target(model_args) == "gpt2":
        return common | {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "n_positions": cfg.block_size,
            "n_embd": cfg.n_embd,
            "n_layer": cfg.n_layer,
            "n_head": cfg.n_head,
            "n_inner": 4 * cfg.n_embd,
            "activation_function": "gelu",  # exact erf GELU, as F.gelu
            "layer_norm_epsilon": 1e-5,
            "resid_pdrop": cfg.dropout,
            "embd_pdrop": cfg.dropout,
            "attn_pdrop": cfg.dropout,
            "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False,
        }
    return common | {
        "architectures": ["GPTNeoXForCausalLM"],
        "model_type": "gpt_neox",
        "max_position_embeddings": cfg.block_size,
        "hidden_size": cfg.n_embd,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "intermediate_size": 4 * cfg.n_embd,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-5,
        "use_parallel_residual": False,
        "attention_bias": True,
        "attention_dropout": cfg.dropout,
        "hidden_dropout": cfg.dropout,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_BASE, "partial_rotary_factor": 1.0},
        # the same settings under transformers 4's names, which 4.x and vLLM read: without them they fall back
        # to rotating a quarter of the head (rotary_pct 0.25), silently
        "rotary_pct": 1.0,
        "rotary_emb_base": ROPE_BASE,
    }


def qkv_rows(model_args: dict, rows: torch.Tensor) -> torch.Tensor:
    """A tensor whose first dimension is Foundry's fused qkv output ([q all heads; k; v], 3 * n_embd rows: the
    qkv weight, its bias, a LoRA B) in the target's order: unchanged for GPT-2, [q_h; k_h; v_h] per head for NeoX."""
    cfg = _args(model_args)
    if rows.shape[0] != 3 * cfg.n_embd:
        raise ValueError(f"expected {3 * cfg.n_embd} qkv rows, got {rows.shape[0]}")
    if target(model_args) == "gpt2":
        return rows
    head = cfg.n_embd // cfg.n_head
    # (3, heads, head_dim, ...) -> (heads, 3, head_dim, ...)
    split = rows.reshape(3, cfg.n_head, head, *rows.shape[1:]).transpose(0, 1)
    return split.reshape(3 * cfg.n_embd, *rows.shape[1:]).contiguous()


# Per-block module names: Foundry's suffix -> (GPT-2's, NeoX's).
_BLOCK = {
    "ln_1": ("ln_1", "input_layernorm"),
    "attn.qkv": ("attn.c_attn", "attention.query_key_value"),
    "attn.proj": ("attn.c_proj", "attention.dense"),
    "ln_2": ("ln_2", "post_attention_layernorm"),
    "mlp.fc": ("mlp.c_fc", "mlp.dense_h_to_4h"),
    "mlp.proj": ("mlp.c_proj", "mlp.dense_4h_to_h"),
}
_TOP = {
    "wte": ("transformer.wte", "gpt_neox.embed_in"),
    "wpe": ("transformer.wpe", None),
    "ln_f": ("transformer.ln_f", "gpt_neox.final_layer_norm"),
    "lm_head": ("lm_head", "lm_head"),
}
_PREFIX = ("transformer.h", "gpt_neox.layers")
_BLOCK_NAME = re.compile(r"blocks\.(\d+)\.(.+)")


def hf_module_name(foundry_name: str, model_args: dict) -> str:
    """The transformers module path of a Foundry module path (`blocks.0.attn.qkv` -> `transformer.h.0.attn.c_attn`
    for GPT-2, `gpt_neox.layers.0.attention.query_key_value` for NeoX); KeyError for a name neither has."""
    which = 0 if target(model_args) == "gpt2" else 1
    found = _BLOCK_NAME.fullmatch(foundry_name)
    if found:
        return f"{_PREFIX[which]}.{found[1]}.{_BLOCK[found[2]][which]}"
    name = _TOP[foundry_name][which]
    if name is None:
        raise KeyError(foundry_name)
    return name


def transposed(foundry_name: str, model_args: dict) -> bool:
    """Whether the target stores this module's weight as (in, out): GPT-2's `Conv1D` projections do."""
    return target(model_args) == "gpt2" and bool(_BLOCK_NAME.fullmatch(foundry_name)) and ".ln_" not in foundry_name


def check_weights(model_args: dict, state_dict: dict[str, torch.Tensor]) -> None:
    """UnsupportedArchitecture unless `state_dict` holds exactly the weights of the architecture `model_args` names
    (an unmapped architecture, an unmerged adapter's extra weights)."""
    cfg = _args(model_args)
    expected = {"wte.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight"}
    expected |= {"wpe.weight"} if cfg.positions == "learned" else set()
    for i in range(cfg.n_layer):
        expected |= {f"blocks.{i}.{module}.{p}" for module in _BLOCK for p in ("weight", "bias")}
    present = set(state_dict)
    if present != expected:
        raise UnsupportedArchitecture(
            f"the weights are not the architecture's: unexpected {sorted(present - expected)[:5]}, "
            f"missing {sorted(expected - present)[:5]} (an unmerged adapter? merge it first)"
        )


def check_vocab(largest_id: int, model_args: dict) -> None:
    """UnsupportedArchitecture when a tokenizer's largest id has no row in the model's embedding."""
    if largest_id >= model_args["vocab_size"]:
        raise UnsupportedArchitecture(
            f"the tokenizer has ids up to {largest_id}, past the model's vocabulary of {model_args['vocab_size']}"
        )


def hf_tensors(model_args: dict, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights under the target's names and layouts, float32 and contiguous; the tied head is left out (the
    config ties it, as transformers' own `save_pretrained` does)."""
    check_weights(model_args, state_dict)
    if not torch.equal(state_dict["lm_head.weight"], state_dict["wte.weight"]):
        raise UnsupportedArchitecture("the output head is not tied to the embedding, as every Foundry GPT's is")
    out = {}
    for key, tensor in state_dict.items():
        if key == "lm_head.weight":
            continue
        module, _, param = key.rpartition(".")
        value = tensor.detach().to(torch.float32)
        if module.endswith("attn.qkv"):
            value = qkv_rows(model_args, value)
        if param == "weight" and transposed(module, model_args):
            value = value.t()
        out[f"{hf_module_name(module, model_args)}.{param}"] = value.contiguous().clone()
    return out
