"""Exported models (#25: tests/fast/export/, tests/slow/export/test_export_gguf_llama.py): a corpus, its tokenizer, and
weights sharp enough that a wrong mapping shows."""

from __future__ import annotations

from pathlib import Path

import torch

from models.chat import ChatTemplate, add_chat_tokens
from models.gpt import GPT, GPTConfig

EXPORT_CORPUS = [
    "The river carried the stone past the old mill, and the light fell on the water.",
    "Add two and three: five. Add four and four: eight. Numbers 12, 345 and 6789 too.",
    "def main():\n    return sum(range(10))  # tabs\tand spaces",
    "Ünïcödé text, émigré café, naïve façade; 東京 and 北京.",
] * 30


def corpus_tokenizer(path: Path, chat: bool = False):
    """A byte-level BPE trained on `EXPORT_CORPUS` as Foundry trains one, with the chat markers when `chat`,
    saved at `path`."""
    from foundry.config.training import TokenizerConfig
    from foundry.pretrain.shards import train_tokenizer

    tokenizer = train_tokenizer(EXPORT_CORPUS, TokenizerConfig(vocab_size=400, min_frequency=1))
    if chat:
        add_chat_tokens(tokenizer, ChatTemplate())
    tokenizer.save(str(path))
    return tokenizer


def sharp_gpt(vocab_size: int, positions: str, seed: int = 0) -> GPT:
    """Random weights large enough that the next token is never a near tie, so greedy decoding and likelihoods
    are sharp tests of an export (a wrong mapping moves them far)."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size, block_size=128, n_layer=2, n_head=4, n_embd=32, positions=positions))
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm_gain = ".ln_" in name and name.endswith("weight")
            p.copy_(1 + 0.1 * torch.randn_like(p) if norm_gain else 0.3 * torch.randn_like(p))
    return model.eval()
