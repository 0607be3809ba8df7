"""The served model (#30 point 6: tests/fast/serving/test_serving_bounds.py, tests/fast/test_security_review.py)."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers_tokenizers import tiny_tokenizer

from models.chat import ChatTemplate
from models.gpt import GPT, GPTConfig


def tiny_served_files(root: Path, seed: int = 0) -> tuple[Path, Path, Path]:
    """A tiny model aligned (`model.pt`, its chat template inside) and not (`base.pt`), and `tokenizer.json`; its
    weights drawn with `seed`."""
    tokenizer = tiny_tokenizer(root / "tokenizer.json")
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=tokenizer.get_vocab_size(), block_size=32, n_layer=2, n_head=2, n_embd=32))
    saved = {"model_args": model.config.to_dict(), "state_dict": model.state_dict()}
    torch.save({**saved, "chat_template": ChatTemplate().to_dict()}, root / "model.pt")
    torch.save(saved, root / "base.pt")
    return root / "model.pt", root / "tokenizer.json", root / "base.pt"
