"""Registered versions without training (#26: tests/fast/evaluate/, tests/slow/evaluate/test_evaluate_flow.py), and
word soup to score them on."""

from __future__ import annotations

from pathlib import Path

import torch

from foundry.config import FoundryConfig
from models.gpt import GPT, GPTConfig


def random_model_files(config: FoundryConfig, tokenizer, folder: Path, logit_scale: float) -> tuple[Path, Path]:
    """`model.pt` of random weights shaped by `config.model` for `tokenizer`, and the tokenizer beside it; logit
    scale 0 gives the uniform distribution (ln V nats a token on anything)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.get_vocab_size(), **config.model.model_dump()))
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)  # tied to the embedding: the output scale follows it
    folder.mkdir(parents=True)
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, folder / "model.pt")
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "model.pt", folder / "tokenizer.json"


def register_files(config: FoundryConfig, name: str, files: tuple[Path, Path]) -> str:
    """A version of `name` logged and published as the pipeline does, champion: `models:/NAME/VERSION`."""
    from foundry.registry import versions
    from foundry.runtime import tracking
    from foundry.serving.package import log_model

    run_id = tracking.start_pipeline_run(config, run_name=f"seed-{name}")
    uri = log_model(run_id, *files)
    return f"models:/{name}/{versions.publish(uri, name, run_id, {}, True, 'seeded for the test').version}"


def word_soup_source(root: Path, folders: tuple[str, ...] = ("alpha", "beta", ""), n: int = 36) -> Path:
    """`n` word-soup documents spread over top-level `folders` of `root` ("" is the root itself)."""
    from synthetic import synthetic_docs

    for i, text in enumerate(synthetic_docs(n, seed=3)):
        folder = root / folders[i % len(folders)]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc{i:02d}.txt").write_text(text)
    return root
