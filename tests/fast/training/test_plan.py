"""foundry.training.plan: the memory estimate against the profiler's measured allocations, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT

from foundry.cli import main
from foundry.config import load_config
from foundry.training.plan import estimate, largest_micro_batch, n_params, parse_bytes
from models.gpt import GPT, GPTConfig
from models.lit_base import adamw
from models.optim import muon_adamw


def config(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", list(overrides))


def measured_peak_bytes(cfg, tmp_path: Path) -> int:
    """Peak of all CPU allocations over one whole training step (forward, backward, clip, AdamW),
    from the profiler's memory timeline; the step is run once before so the optimizer state exists."""
    from torch.profiler import ProfilerActivity, profile

    from foundry.core.workload import named
    from foundry.pretrain.training import vocabulary_only
    from foundry.training.trainer import build_module

    torch.manual_seed(0)
    m, t, vocab = cfg.model, cfg.train, cfg.tokenizer.vocab_size
    module = build_module(cfg, named("text"), vocabulary_only(vocab))
    if t.uses_muon:  # what training builds
        optimizer = muon_adamw(module.model, t.learning_rate, t.muon_learning_rate, t.weight_decay, module.muon_blocks)
    else:
        optimizer = adamw(module.model, t.learning_rate, t.weight_decay, "32-true")
        assert optimizer.defaults["fused"]
    x = torch.randint(0, vocab, (t.batch_size, m.block_size))
    batch = (x, torch.roll(x, -1, 1))

    def step():
        optimizer.zero_grad(set_to_none=True)
        module.training_step(batch, 0).backward()  # as Lightning: the logits die with training_step
        torch.nn.utils.clip_grad_norm_(module.parameters(), t.grad_clip)
        optimizer.step()

    step()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    prof.export_memory_timeline(str(tmp_path / "memory.json"), device="cpu")
    _, sizes = json.loads((tmp_path / "memory.json").read_text())
    return max(sum(row) for row in sizes)


# The configs the activation and optimizer constants of foundry/training/plan.py were fitted on ...
FITTED = {
    "fitted-3x128": (
        "model.n_layer=3",
        "model.n_embd=128",
        "model.n_head=4",
        "model.block_size=128",
        "train.batch_size=16",
    ),
    "fitted-dropout": (
        "model.n_layer=2",
        "model.n_embd=64",
        "model.n_head=4",
        "model.block_size=64",
        "train.batch_size=8",
        "model.dropout=0.1",
    ),
    "fitted-optimizer-bound": (
        "model.n_layer=2",
        "model.n_embd=256",
        "model.n_head=4",
        "model.block_size=16",
        "train.batch_size=1",
    ),
}
# ... and configs they were not fitted on: other widths, heads, depths, vocabularies, contexts and dropout.
HELD_OUT = {
    "held-out-4x96": (
        "model.n_layer=4",
        "model.n_embd=96",
        "model.n_head=3",
        "model.block_size=48",
        "train.batch_size=12",
        "tokenizer.vocab_size=1000",
    ),
    "held-out-dropout-0.2": (
        "model.n_layer=1",
        "model.n_embd=160",
        "model.n_head=5",
        "model.block_size=96",
        "train.batch_size=6",
        "model.dropout=0.2",
        "tokenizer.vocab_size=777",
    ),
    "held-out-long-context": (
        "model.n_layer=2",
        "model.n_embd=48",
        "model.n_head=2",
        "model.block_size=200",
        "train.batch_size=3",
        "tokenizer.vocab_size=2048",
    ),
    "held-out-5x320": (
        "model.n_layer=5",
        "model.n_embd=320",
        "model.n_head=8",
        "model.block_size=32",
        "train.batch_size=2",
        "tokenizer.vocab_size=300",
    ),
}
TOLERANCE = 0.10  # docs/training.md states this bound


VARIANTS = {"default": (), "before": ("model.positions=learned", "train.optimizer=adamw")}
CASES = [(name, variant) for variant in VARIANTS for name in [*FITTED, *HELD_OUT]]
# Value embeddings on one fitted and one held-out config: each case costs the fast lane up to 3 s.
VARIANTS["value-embeddings"] = ("model.value_embeddings=true",)
CASES += [("fitted-3x128", "value-embeddings"), ("held-out-4x96", "value-embeddings")]
VARIANTS["ahead"] = ("model.mtp_depth=2",)  # multi-token prediction: two more heads' log-softmax
CASES += [("fitted-3x128", "ahead"), ("held-out-4x96", "ahead")]


@pytest.mark.filterwarnings("ignore:`export_memory_timeline` is deprecated")
@pytest.mark.parametrize("name, variant", CASES, ids=[f"{name}-{variant}" for name, variant in CASES])
def test_estimate_is_within_a_tenth_of_the_measured_peak(name, variant, tmp_path):
    """The defaults (rotary positions, Muon), learned positions with the fused AdamW (the earlier defaults), and the
    defaults with value embeddings or with two predictions further ahead."""
    cfg = config(*{**FITTED, **HELD_OUT}[name], *VARIANTS[variant])
    predicted, measured = estimate(cfg).peak, measured_peak_bytes(cfg, tmp_path)
    print(f"{name}: plan {predicted / 2**20:.2f} MiB, measured {measured / 2**20:.2f} MiB")
    assert predicted == pytest.approx(measured, rel=TOLERANCE), (predicted, measured)


def test_parameter_count_matches_the_model():
    wider = ("model.n_layer=4", "model.n_embd=96", "model.n_head=3", "tokenizer.vocab_size=1000")
    variants = (
        (),
        ("model.positions=learned",),
        ("model.bigram_buckets=64",),
        ("model.value_embeddings=true",),
        wider,
        (*wider, "model.value_embeddings=true"),
        (*wider, "model.mtp_depth=2"),
        (*wider, "model.positions=learned"),
    )
    for overrides in variants:
        cfg = config(*overrides)
        model = GPT(GPTConfig(cfg.tokenizer.vocab_size, **cfg.model.model_dump()))
        assert n_params(cfg.model, cfg.tokenizer.vocab_size) == model.num_params(non_embedding=False)


def test_muon_keeps_one_moment_for_the_blocks_matrices():
    muon, adam = config(), config("train.optimizer=adamw")
    m = muon.model
    assert muon.train.uses_muon and not adam.train.uses_muon
    assert estimate(adam).optimizer - estimate(muon).optimizer == 4 * m.n_layer * 12 * m.n_embd * m.n_embd


def test_largest_micro_batch_is_the_last_that_fits():
    cfg = config()
    memory = parse_bytes("64MiB")
    fits = largest_micro_batch(cfg, memory)
    assert fits > 0
    assert estimate(cfg, fits).peak <= 0.9 * memory < estimate(cfg, fits + 1).peak
    assert largest_micro_batch(cfg, parse_bytes("1KB")) == 0
    # More devices under FSDP: less state per device, so a larger micro-batch fits.
    sharded = config(
        "train.strategy=fsdp",
        "train.accelerator=gpu",
        "train.num_nodes=8",
        "train.precision=32-true",
        "train.optimizer=adamw",
    )
    assert estimate(sharded).optimizer < estimate(cfg).optimizer


def test_parse_bytes():
    assert parse_bytes("80GB") == 80 * 10**9 and parse_bytes("80 GiB") == 80 * 2**30
    assert parse_bytes("512mb") == 512 * 10**6 and parse_bytes("1e9") == 10**9
    with pytest.raises(ValueError, match="not a size"):
        parse_bytes("lots")


def test_cli_prints_the_plan(capsys):
    assert (
        main(
            [
                "plan",
                "--config",
                str(REPO_ROOT / "configs" / "tiny.yaml"),
                "--set",
                "train.batch_size=4",
                "--device-memory",
                "80GB",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "micro-batch of 4 x 32 tokens" in out and "fits         micro-batch" in out
    assert main(["plan", "--device-memory", "eighty"]) == 2


def test_lora_counts_gradients_and_optimizer_state_for_the_adapters_only():
    """The adapters are what `add_lora` adds to the real model; the frozen weights have no gradients or moments."""
    from foundry.pretrain.training import model_args
    from models.lora import LoRASpec, add_lora, trainable_share

    full = config("train.init_from=parent.pt")
    lora = config("train.init_from=parent.pt", "finetune.method=lora", "finetune.lora_rank=4")
    model = GPT(GPTConfig(**model_args(lora, lora.tokenizer.vocab_size)))
    add_lora(model, LoRASpec(rank=4))
    trainable, total = trainable_share(model)
    plan, full_plan = estimate(lora), estimate(full)
    assert (plan.params, plan.gradients, plan.optimizer) == (total, 4 * trainable, 8 * trainable)
    assert plan.parameters == 4 * total and plan.peak < full_plan.peak
    one_target = estimate(config("finetune.method=lora", "finetune.lora_rank=4", "finetune.lora_targets=[fc]"))
    assert one_target.gradients == 4 * 4 * (32 + 4 * 32)  # one block, mlp.fc only: rank x (in + out)
