"""The promotion gates against a real registry: a champion's data as a real data version, a champion trained on
it, and registering it (tests/fast/registry/test_gate.py, tests/fast/specialists/test_merge_gate.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from foundry.core.contracts import SourceManifest
from foundry.data.hydrate import hydrate_version
from foundry.data.versioning import version_dataset
from foundry.pretrain.shards import load_split
from foundry.registry import versions
from foundry.runtime import tracking
from foundry.serving.package import log_model
from models.gpt import GPT, GPTConfig


def named(config, name: str, **evaluation):
    return config.model_copy(
        update={
            "registry": config.registry.model_copy(update={"model_name": name}),
            "evaluation": config.evaluation.model_copy(update=evaluation),
        }
    )


@pytest.fixture(scope="module")
def old_data(tiny_config, tiny_dataset, foundry_home, tmp_path_factory):
    """The tiny dataset as a real data version in the session's DVC remote, hydrated: a champion's data."""
    staged = tmp_path_factory.mktemp("old-data") / "prepared"
    shutil.copytree(tiny_dataset, staged)
    manifest = SourceManifest.read(tiny_dataset.parent / "source_manifest.json")
    data = version_dataset(tiny_config, staged, manifest, foundry_home)
    return data, hydrate_version(data, foundry_home)


def save(model: GPT, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, path)
    return path


def fit(model: GPT, tokens: np.ndarray, steps: int, lr: float, seed: int = 0) -> GPT:
    """A plain training loop on random windows: enough to make a model know (or forget) a corpus."""
    generator = torch.Generator().manual_seed(seed)
    block = model.config.block_size
    data = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(data) - block - 1, (16,), generator=generator)
        x = torch.stack([data[s : s + block] for s in starts])
        y = torch.stack([data[s + 1 : s + block + 1] for s in starts])
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def champion_checkpoint(tiny_config, old_data, tmp_path_factory):
    """A small model trained briefly on the old data's train split, saved as training saves `model.pt`."""
    _, folder = old_data
    vocab = json.loads((folder / "manifest.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab, **tiny_config.model.model_dump()))
    fit(model, load_split(folder, "train"), steps=60, lr=3e-3)
    return save(model, tmp_path_factory.mktemp("champion") / "model.pt")


def register_champion(config, checkpoint, tokenizer, tags: dict) -> str:
    name = config.registry.model_name
    run_id = tracking.start_pipeline_run(config, run_name=f"gate-{name}")
    uri = log_model(run_id, checkpoint, tokenizer)
    return versions.publish(uri, name, run_id, tags, True, "seeded for the test").version
