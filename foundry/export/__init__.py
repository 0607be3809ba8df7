"""Registered versions in formats other tools open: Hugging Face `transformers` folders (`hf`), llama.cpp's GGUF
(`gguf`) and PEFT adapters. `layout` maps Foundry's weights onto existing architectures; `publish` attaches an
export to its registered version."""
