"""Registered versions in formats other tools open: Hugging Face `transformers` folders (`hf`), llama.cpp's GGUF
(`gguf`) and PEFT adapters (`peft`). `layout` maps Foundry's weights onto existing architectures; `publish` attaches an
export to its registered version, in the formats the version's workload lists (`Workload.exports`)."""

from types import MappingProxyType

# What the exporters write, as a number: bump it whenever a mapping or a written file changes, so that exports a
# version carries from an older exporter are written again instead of reused (`publish`).
# 1: the first exporters; 2: rotary config.json also under transformers 4's names (rotary_pct, rotary_emb_base),
# PEFT targets as full module names, GGUF general.name the source version's URI.
FORMAT_VERSION = 2

# The writers of a saved GPT and its tokenizer, text or aligned (`foundry.pretrain.workload.GptWorkload.exports`):
# format -> (module, function(saved, tokenizer_file, out_dir, source=URI) -> Path), imported when asked for.
GPT_WRITERS = MappingProxyType({"hf": ("foundry.export.hf", "write_hf"), "gguf": ("foundry.export.gguf", "write_gguf")})
