"""Alignment trains on pretraining's stack: checkpoints, and a resume bitwise equal to an uninterrupted run,
for SFT (packed conversations) and DPO (pairs, the reference rebuilt from the starting weights)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from foundry.align.instructions import write_instruction_set
from foundry.align.prepare import prepare_aligned
from foundry.checkpointing.manifest import latest_valid, read_manifest
from foundry.config import load_config
from foundry.data.acquire import acquire_source
from foundry.training.launch import launch
from foundry.training.trainer import weights_digest
from models.chat import ChatTemplate, add_chat_tokens, grow_vocabulary
from models.gpt import GPT, GPTConfig, load_saved

# Dropout and gradient accumulation on: the RNG states and the sampler's position must both be restored.
RESUMABLE = ("train.max_steps=10", "checkpoint.every_n_steps=5", "model.dropout=0.1", "train.grad_accum_steps=2")


def digest(model_pt: Path) -> str:
    return weights_digest(torch.load(model_pt, weights_only=True)["state_dict"])


@pytest.fixture(scope="module")
def aligned_data(tiny_dataset, tmp_path_factory) -> dict:
    """A grown random base and prepared SFT and DPO datasets over the tiny twin's tokenizer: {method: (config, dir)}."""
    from tokenizers import Tokenizer

    root = tmp_path_factory.mktemp("aligned-data")
    tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    old_vocab = tokenizer.get_vocab_size()
    add_chat_tokens(tokenizer, ChatTemplate())
    tokenizer.save(str(root / "tokenizer.json"))
    torch.manual_seed(0)
    small = GPT(GPTConfig(vocab_size=old_vocab, block_size=48, n_layer=1, n_head=2, n_embd=32, positions="rotary"))
    grown = grow_vocabulary(small, tokenizer.get_vocab_size())
    torch.save({"model_args": grown.config.to_dict(), "state_dict": grown.state_dict()}, root / "base.pt")
    written = write_instruction_set(root / "instructions", train=30, test=5, pairs=20)
    prepared = {}
    for method in ("sft", "dpo"):
        config = load_config(
            None,
            [
                f"data.source={written[method].parent}",
                f"align.method={method}",
                "align.replay_fraction=0",  # no pretraining data to replay here (tests/fast/align/test_dpo_replay.py)
                f"tokenizer.from_file={root / 'tokenizer.json'}",
                f"train.init_from={root / 'base.pt'}",
                "model.block_size=48",
                "model.n_layer=1",
                "model.n_head=2",
                "model.n_embd=32",
                "train.batch_size=4",
                "train.warmup_steps=2",
                "train.val_every_n_steps=5",
                "train.val_batches=2",
                "train.log_every_n_steps=5",
                *RESUMABLE,
            ],
        )
        manifest = acquire_source(config.data, root / f"{method}-source.json")
        prepare_aligned(manifest, config, root / method)
        prepared[method] = (config, root / method)
    return prepared


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_alignment_resumes_bitwise_exact_from_the_last_intact_checkpoint(method, aligned_data, tmp_path):
    config, data_dir = aligned_data[method]
    uninterrupted = tmp_path / "uninterrupted"
    model_pt = launch(config, data_dir, uninterrupted, None, "v")
    saved = load_saved(model_pt)
    assert saved["chat_template"] == ChatTemplate().to_dict()  # the template travels in model.pt
    assert digest(model_pt) != weights_digest(torch.load(config.train.init_from, weights_only=True)["state_dict"])
    assert [e.step for e in read_manifest(uninterrupted)] == [5, 10]

    folder = shutil.copytree(uninterrupted, tmp_path / "resumed")
    latest = folder / "step-000010.ckpt"
    with open(latest, "r+b") as f:  # a write cut short
        f.truncate(latest.stat().st_size // 2)
    (folder / "model.pt").unlink()
    assert latest_valid(folder).step == 5
    assert digest(launch(config, data_dir, folder, None, "v")) == digest(model_pt)
    checkpoint = torch.load(folder / "step-000010.ckpt", weights_only=False)
    assert not any("reference" in key for key in checkpoint["state_dict"])  # the policy only
