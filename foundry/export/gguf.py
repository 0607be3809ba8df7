"""A saved Foundry model as one GGUF file for llama.cpp (and what builds on it: Ollama, llama-cpp-python).

The architectures are llama.cpp's own, as its `convert_hf_to_gguf.py` writes them from the transformers
models `foundry.export.layout` maps onto (names from `gguf.constants.TENSOR_NAMES`):
- learned positions -> `gpt2`: token_embd, position_embd, blk.N.{attn_norm, attn_qkv, attn_output, ffn_norm,
  ffn_up, ffn_down}, output_norm, output. Weights keep torch's (out, in) layout: the converter transposes
  GPT-2's Conv1D back to it, and llama.cpp's fused qkv is [q all heads; k; v], as Foundry's.
- rotary -> `gptneox`: the same names without position_embd; rope over the whole head (rope dims = head size,
  llama.cpp's NEOX rope pairs i with i + head/2, as Foundry's `rotate`), base 10000, `use_parallel_residual`
  false (Foundry's sequential block). The converter undoes NeoX's per-head qkv interleave, so Foundry's rows
  go in unchanged.
The tokenizer is embedded as llama.cpp's `gpt2` BPE (tokens, types, merges, GPT-2 pre-tokenizer regex), the
end-of-text token as bos and eos (an aligned model's eos: its template's end marker), neither added by llama.cpp
(Foundry adds none). llama.cpp computes GELU with the tanh approximation where Foundry uses the exact erf:
logits differ by ~1e-3 (tests/slow/export/test_export_gguf_llama.py runs the file in llama.cpp).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from foundry.export.hf import jinja_template
from foundry.export.layout import EOS, ROPE_BASE, UnsupportedArchitecture, check_vocab, check_weights, target
from models.chat import ChatTemplate, saved_template
from models.gpt import GPTConfig

GGUF_FILE = "model.gguf"
LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which every Foundry block uses
# Foundry's module -> llama.cpp's tensor (gguf.constants.TENSOR_NAMES of GPT2 / GPTNEOX).
_TOP = {"wte": "token_embd", "wpe": "position_embd", "ln_f": "output_norm", "lm_head": "output"}
_BLOCK = {
    "ln_1": "attn_norm",
    "attn.qkv": "attn_qkv",
    "attn.proj": "attn_output",
    "ln_2": "ffn_norm",
    "mlp.fc": "ffn_up",
    "mlp.proj": "ffn_down",
}
_ARCH = {"gpt2": "gpt2", "gpt_neox": "gptneox"}  # layout.target -> llama.cpp's architecture name


def gguf_name(foundry_key: str) -> str:
    """llama.cpp's tensor name of a Foundry state-dict key (`blocks.0.attn.qkv.weight` -> `blk.0.attn_qkv.weight`)."""
    module, _, param = foundry_key.rpartition(".")
    if module.startswith("blocks."):
        _, index, rest = module.split(".", 2)
        return f"blk.{index}.{_BLOCK[rest]}.{param}"
    return f"{_TOP[module]}.{param}"


def gguf_tensors(
    model_args: dict, state_dict: dict[str, torch.Tensor], dtype: Literal["f32", "f16"] = "f32"
) -> dict[str, np.ndarray]:
    """The weights under llama.cpp's names, in numpy's (out, in) order. f16 halves matrices only: llama.cpp
    keeps norms and biases in f32, as its converter writes them."""
    check_weights(model_args, state_dict)
    out = {}
    for key, tensor in state_dict.items():
        value = tensor.detach().to(torch.float32).cpu().contiguous().numpy()
        if dtype == "f16" and value.ndim == 2:
            value = value.astype(np.float16)
        out[gguf_name(key)] = value
    return out


def gguf_vocab(tokenizer_file: Path, model_args: dict) -> tuple[list[str], list[int], list[str], dict[str, int]]:
    """(tokens by id, their llama.cpp types, merges as "a b", special tokens' ids) of a byte-level BPE
    `tokenizer.json`. Ids the tokenizer lacks but the embedding has become unused padding tokens."""
    from gguf import TokenType

    spec = json.loads(Path(tokenizer_file).read_text(encoding="utf-8"))
    if spec["model"]["type"] != "BPE":
        raise UnsupportedArchitecture(f"tokenizer model {spec['model']['type']!r} is not a byte-level BPE")
    by_id = {i: (t, TokenType.NORMAL) for t, i in spec["model"]["vocab"].items()}
    special = {}
    for added in spec.get("added_tokens", []):
        by_id[added["id"]] = (added["content"], TokenType.CONTROL if added["special"] else TokenType.USER_DEFINED)
        special |= {added["content"]: added["id"]} if added["special"] else {}
    check_vocab(max(by_id), model_args)
    padded = [by_id.get(i, (f"[PAD{i}]", TokenType.UNUSED)) for i in range(model_args["vocab_size"])]
    # tokenizers writes merges as "a b" strings (before 0.20) or [a, b] pairs
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    return [t for t, _ in padded], [int(k) for _, k in padded], merges, special


def write_gguf(
    saved: dict,
    tokenizer_file: Path,
    out_dir: Path,
    dtype: Literal["f32", "f16"] = "f32",
    source: str = "foundry-gpt",
) -> Path:
    """`out_dir/model.gguf` for a saved model (`models.gpt.load_saved`) and its `tokenizer.json`, named
    (`general.name`) after `source`, the version it comes from, as the HF export's card is; an aligned model's
    chat template goes in as `tokenizer.chat_template` (the HF export's Jinja), its end marker as eos."""
    import gguf

    model_args = saved["model_args"]
    tensors = gguf_tensors(model_args, saved["state_dict"], dtype)  # refuses unmappable models first
    cfg = GPTConfig(**model_args)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / GGUF_FILE
    writer = gguf.GGUFWriter(path, _ARCH[target(model_args)])
    writer.add_name(source)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    _add_hyperparameters(writer, cfg)
    _add_tokenizer(writer, tokenizer_file, model_args, saved_template(saved))
    for tensor_name, value in tensors.items():
        writer.add_tensor(tensor_name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_hyperparameters(writer, cfg: GPTConfig) -> None:
    writer.add_context_length(cfg.block_size)
    writer.add_embedding_length(cfg.n_embd)
    writer.add_block_count(cfg.n_layer)
    writer.add_feed_forward_length(4 * cfg.n_embd)
    writer.add_head_count(cfg.n_head)
    writer.add_layer_norm_eps(LAYER_NORM_EPS)
    writer.add_vocab_size(cfg.vocab_size)
    if cfg.positions == "rotary":
        writer.add_rope_dimension_count(cfg.n_embd // cfg.n_head)
        writer.add_rope_freq_base(ROPE_BASE)
        writer.add_parallel_residual(False)


def _add_tokenizer(writer, tokenizer_file: Path, model_args: dict, template: ChatTemplate | None) -> None:
    tokens, types, merges, special = gguf_vocab(tokenizer_file, model_args)
    # An aligned model's reply ends at its template's end marker (as Foundry's serving and the HF export stop)
    stop = EOS if template is None else template.end
    for token in {EOS, stop}:
        if token not in special:
            raise UnsupportedArchitecture(f"the tokenizer has no {token!r} special token, where generation stops")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")  # ByteLevel(use_regex=True) splits with GPT-2's regex
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(special[stop])
    writer.add_bos_token_id(special[EOS])
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    if template is not None:
        writer.add_chat_template(jinja_template(template))
