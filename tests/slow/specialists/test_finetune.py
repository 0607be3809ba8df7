"""Domain fine-tuning through the real flow, from the session's `it-gpt` (trained on stdlib://email) to another
corpus the machine has (stdlib://importlib): LoRA and full, the gate against the base both ways, lineage."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, run_page
from helpers_configs import NO_BASELINES
from helpers_training import wait_for_checkpoint

from foundry.config import load_config
from foundry.runtime import tracking

DOMAIN = "stdlib://importlib"
EMAIL, AWS_KEY = "jane.doe@example.com", "AKIAIOSFODNN7EXAMPLE"
# a LoRA run's adapters: Foundry's own, and PEFT's config and weights (foundry/export/peft.py)
ADAPTER_ARTIFACTS = {"adapter/adapter.pt", "adapter/adapter_config.json", "adapter/adapter_model.safetensors"}


def domain(*overrides: str):
    steps = ["train.max_steps=20", "train.warmup_steps=2", "train.val_every_n_steps=10"]
    sets = [f"data.source={DOMAIN}", *steps, *NO_BASELINES, *overrides]  # the gates read bits/byte, not baselines
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", sets)


def weights(model_uri: str, home: Path) -> dict[str, torch.Tensor]:
    from foundry.registry import versions

    files = versions.download(versions.resolve(model_uri), home)
    return torch.load(files / "model.pt", map_location="cpu", weights_only=True)["state_dict"]


def random_parent(dataset: Path, tmp_path: Path) -> Path:
    """A seeded, untrained tiny model of the dataset's vocabulary, saved as a fine-tune's `train.init_from`."""
    from foundry.pretrain.training import model_args
    from foundry.training.trainer import save_model
    from models.gpt import GPT, GPTConfig

    plain = load_config(REPO_ROOT / "configs" / "tiny.yaml")
    args = model_args(plain, json.loads((dataset / "manifest.json").read_text())["vocab_size"])
    torch.manual_seed(0)
    parent = tmp_path / "parent.pt"
    save_model(parent, args, GPT(GPTConfig(**args)).state_dict(), plain, "v")
    return parent


def test_a_lora_specialist_trains_adapters_only_merges_them_in_and_records_its_base(
    base_model, prefect_harness, foundry_home
):
    from flows.finetune import finetune
    from foundry.registry.lineage import lineage

    _, base = base_model
    # A gain no specialist makes: the gate must refuse, whatever 20 steps of rank 2 learn (0.006 bits/byte here).
    strict = ("evaluation.min_improvement=100",)
    config = domain("finetune.method=lora", "finetune.lora_rank=2", "train.learning_rate=0.01", *strict)
    result = finetune(model="models:/it-gpt@champion", config=config)
    assert result.parent == base.model_uri and result.model_name == "it-gpt-importlib"

    run = tracking.client().get_run(result.run_id)
    # Rank 2 on one block's four projections of width 32: 2 x ((32 + 96) + (32 + 32) + (32 + 128) + (128 + 32)).
    assert run.data.metrics["finetune/trainable_params"] == 2 * 512
    assert run.data.metrics["finetune/trainable_share"] < 0.05
    assert {a.path for a in tracking.client().list_artifacts(result.run_id, "adapter")} == ADAPTER_ARTIFACTS

    tuned, original = weights(result.model_uri, foundry_home), weights(base.model_uri, foundry_home)
    assert tuned.keys() == original.keys()  # merged in: the base architecture, served unchanged
    frozen = [k for k in original if not k.startswith("blocks.0.attn.") and not k.startswith("blocks.0.mlp.")]
    assert all(torch.equal(tuned[k], original[k]) for k in frozen)  # embeddings, norms: untouched
    assert not torch.equal(tuned["blocks.0.attn.qkv.weight"], original["blocks.0.attn.qkv.weight"])
    assert torch.equal(tuned["blocks.0.attn.qkv.bias"], original["blocks.0.attn.qkv.bias"])  # adapters: weights only

    version = tracking.client().get_model_version(result.model_name, result.model_version)
    tags = version.tags
    assert tags["parent_model"] == base.model_uri and tags["gate.champion_version"] == base.model_version
    assert tags["gate.old_holdout_version"] == base.data_version  # scored on what the base knew
    scores = run.data.metrics
    on_domain, on_base = scores["gate/champion_bits_per_byte"], scores["gate/champion_old_holdout_bits_per_byte"]
    regression = scores["gate/old_holdout_bits_per_byte"] - on_base
    assert regression == pytest.approx(scores["gate/old_holdout_regression"])
    assert tags["gate.passed"] == "false" and not result.promoted, tags["gate.verdict"]
    assert "does not beat the base's" in tags["gate.verdict"] and "Forgetting guard" in version.description
    assert tags["gate.champion_bits_per_byte"] == f"{on_domain:.6f}"
    assert tags["gate.champion_old_bits_per_byte"] == f"{on_base:.6f}"
    card = version.description  # the base's scores, named as the base's, not as a champion's
    assert f"| base {base.model_uri} | {on_domain:.4f} |" in card and "current champion" not in card
    assert f"On the base's ({base.model_uri}) own holdout" in card and f"the base {on_base:.4f} bits/byte" in card
    chain = lineage(result.model_uri)
    assert [r.model for r in chain] == [result.model_uri, base.model_uri]
    assert chain[-1].data_version == base.data_version
    flow_run, artifacts = run_page(result.run_id)
    assert flow_run.name == f"finetune-lora-it-gpt-{result.data_version[:8]}"
    assert {"pipeline-summary", "data-stage", "mlflow-run", "model-version"} <= artifacts.keys()
    assert result.model_uri in artifacts["pipeline-summary"].data


def test_a_specialist_that_forgets_the_base_is_refused_and_its_domain_data_is_scrubbed(
    base_model, prefect_harness, foundry_home, tmp_path, capsys
):
    """Full fine-tuning at a high rate, with no regression allowed on the base's holdout. The domain holds a
    confidential file: its e-mail address and AWS key are replaced before tokenization, and counted."""
    import textwrap

    from tokenizers import Tokenizer

    from foundry.cli import main
    from foundry.pretrain.shards import load_split

    confidential = tmp_path / "confidential"
    confidential.mkdir()
    planted = f"# maintainer: {EMAIL}, deploy key {AWS_KEY}\n"
    (confidential / "wrapping.py").write_text(planted + Path(textwrap.__file__).read_text())
    overrides = [
        f"data.source={DOMAIN}",
        f"data.sources=[{confidential}]",
        "train.max_steps=20",
        "train.warmup_steps=2",
        "train.learning_rate=0.02",
        "evaluation.max_regression=0",
        "finetune.model_name=it-gpt-forgetful",
        *NO_BASELINES,
    ]
    argv = ["finetune", base_model[1].model_uri, "--config", str(REPO_ROOT / "configs" / "tiny.yaml")]
    for override in overrides:
        argv += ["--set", override]
    assert main(argv) == 0
    assert 'load_model("models:/it-gpt-forgetful/1")' in capsys.readouterr().out  # refused: not `@champion`
    version = tracking.client().get_model_version("it-gpt-forgetful", "1")
    assert version.tags["gate.passed"] == "false" and version.aliases == ["challenger"]
    assert version.tags["gate.verdict"].startswith("forgets: "), version.tags["gate.verdict"]

    data_dir = foundry_home / "hydrated" / version.tags["data_version"]
    rules = json.loads((data_dir / "audit.json").read_text())["rules"]
    assert rules["email"]["spans"] >= 1 and rules["aws_access_key"]["spans"] == 1
    tokenizer = Tokenizer.from_file(str(data_dir / "tokenizer.json"))
    text = "".join(tokenizer.decode(np.asarray(load_split(data_dir, split)).tolist()) for split in ("train", "holdout"))
    assert "def dedent(" in text  # the planted file was kept, scrubbed
    assert EMAIL not in text and AWS_KEY not in text
    assert (confidential / "wrapping.py").read_text().startswith(planted)  # the input is never modified


def test_a_lora_fine_tune_killed_with_sigkill_resumes_bitwise_exact(tiny_dataset, tmp_path, monkeypatch):
    """The adapters are in the checkpoints; the resumed run wraps the model before restoring them, and ends
    with the same merged weights and adapters as a run never stopped (dropout on the adapters included)."""
    from foundry.checkpointing.manifest import latest_valid
    from foundry.checkpointing.resume import attempt_dir
    from foundry.core.contracts import DataVersion, RunContext
    from foundry.training.launch import launch, worker_args
    from foundry.training.trainer import weights_digest
    from tasks.training import Training, train_task

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # as test_train's kill -9 test: one thread count
        monkeypatch.setenv(name, "1")
    parent = random_parent(tiny_dataset, tmp_path)
    config = load_config(
        REPO_ROOT / "configs" / "tiny.yaml",
        ["train.max_steps=30", "checkpoint.every_n_steps=10", f"train.init_from={parent}"]
        + ["finetune.method=lora", "finetune.lora_dropout=0.1", "finetune.lora_rank=4"],
    )
    never_stopped = launch(config, tiny_dataset, tmp_path / "uninterrupted", None, "v")

    home = tmp_path / "home"
    version = "7" * 32  # the train task below finds the killed attempt by this version in its key
    attempt = attempt_dir(home, config, version)
    proc = subprocess.Popen([sys.executable, *worker_args(config, tiny_dataset, attempt, None, version, None)])
    wait_for_checkpoint(attempt, lambda: proc.poll() is None)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    killed_at = latest_valid(attempt).step
    assert 0 < killed_at < config.train.max_steps

    run = RunContext(run_id=tracking.start_pipeline_run(config), dir=tmp_path / "run", home=home)
    resumed = train_task.fn(Training(config, tiny_dataset, DataVersion(data_version=version, remote=""), run))
    assert tracking.client().get_run(run.run_id).data.tags["resumed_from_step"] == str(killed_at)

    def load(path):
        return torch.load(path, map_location="cpu", weights_only=True)

    assert weights_digest(load(resumed)["state_dict"]) == weights_digest(load(never_stopped)["state_dict"])
    assert weights_digest(load(resumed.parent / "adapter.pt")) == weights_digest(
        load(never_stopped.parent / "adapter.pt")
    )
    assert {a.path for a in tracking.client().list_artifacts(run.run_id, "adapter")} == ADAPTER_ARTIFACTS


def test_lora_trains_on_two_ranks_with_the_base_frozen(tiny_dataset, tmp_path):
    """The same code on two processes (DDP): the ranks agree on the merged weights (each writes its digest and
    the launcher compares them), the frozen weights are the parent's and the adapted projections moved."""
    from foundry.training.launch import launch

    parent = random_parent(tiny_dataset, tmp_path)
    config = load_config(
        REPO_ROOT / "configs" / "tiny.yaml",
        ["train.num_nodes=2", "train.max_steps=6", "train.warmup_steps=1", f"train.init_from={parent}"]
        + ["finetune.method=lora", "finetune.lora_rank=2", "train.learning_rate=0.01"],
    )
    tuned = launch(config, tiny_dataset, tmp_path / "ckpt", None, "v")

    def load(path):
        return torch.load(path, map_location="cpu", weights_only=True)

    before, after = load(parent)["state_dict"], load(tuned)["state_dict"]
    adapted = {k for k in before if k.endswith(".weight") and (".attn." in k or ".mlp." in k)}
    assert adapted and after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before.keys() - adapted)
    assert all(not torch.equal(after[k], before[k]) for k in adapted)
    assert load(tuned.parent / "adapter.pt")  # the adapters themselves, beside the merged weights
    assert sorted(p.name for p in (tuned.parent / "peft-adapter").iterdir()) == [  # and in PEFT's format
        "adapter_config.json",
        "adapter_model.safetensors",
    ]


def test_a_second_fine_tune_of_a_specialist_keeps_its_domain_holdout(base_model, prefect_harness, foundry_home):
    """The specialist's own champion's ledger is what its next data version builds on: documents keep their
    split when the domain grows (here by a second source), as the base's do across retrains."""
    import pandas as pd

    from flows.finetune import finetune

    def splits(data_version: str) -> dict[str, str]:
        table = pd.read_csv(foundry_home / "hydrated" / data_version / "documents.csv", dtype=str)
        return dict(zip(table["sha256"], table["split"]))

    lenient = ["finetune.model_name=it-gpt-sticky", "evaluation.max_regression=10"]
    base = base_model[1].model_uri
    first = finetune(model=base, config=domain(*lenient))
    assert first.promoted, first.verdict  # beats the base on the domain; forgetting allowed here
    # Three times the steps, on the grown domain: it must beat the first on the grown domain's holdout.
    second = finetune(model=base, config=domain(*lenient, "data.sources=[stdlib://json]", "train.max_steps=60"))
    old, new = splits(first.data_version), splits(second.data_version)
    assert second.data_version != first.data_version and len(new) > len(old)
    assert old.keys() <= new.keys() and all(new[sha] == split for sha, split in old.items())
    run = tracking.client().get_run(second.run_id)
    assert run.data.tags["parent_data_version"] == first.data_version

    # The first is the specialist's champion: the second must beat it too, on the second's domain holdout.
    version = tracking.client().get_model_version("it-gpt-sticky", second.model_version)
    incumbent = run.data.metrics["gate/incumbent_bits_per_byte"]
    assert version.tags["gate.incumbent_version"] == first.model_version
    score, base_score = second.metrics.bits_per_byte, run.data.metrics["gate/champion_bits_per_byte"]
    assert score < incumbent and score < base_score and second.promoted, second.verdict
    champion = tracking.client().get_model_version_by_alias("it-gpt-sticky", "champion")
    assert str(champion.version) == second.model_version
