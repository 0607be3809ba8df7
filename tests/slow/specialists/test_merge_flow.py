"""The merge flow under a real Prefect server and MLflow registry, on specialists of the session's `it-gpt`.

The specialists are the session's it-gpt version trained a few more steps on its own training split (two seeds),
or spoilt with noise, and registered with that version as `parent_model` and it-gpt's data version, as a
fine-tune records them; their holdout is therefore it-gpt's own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, run_page
from helpers_configs import NO_BASELINES

from foundry.config import load_config
from foundry.runtime import tracking


def tiny(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", ["registry.model_name=it-gpt", *overrides])


def register_specialist(name: str, home: Path, base_uri: str, change, **model_args) -> str:
    """The weights of `base_uri` changed by `change(model, train_tokens)`, registered as `name`'s champion."""
    from foundry.registry import versions
    from foundry.registry.lineage import recorded_config
    from foundry.registry.parent import data_of
    from foundry.serving.package import log_model
    from foundry.training.trainer import save_model
    from models.gpt import GPT, GPTConfig

    base = versions.resolve(base_uri)
    files = versions.download(base, home)
    saved = torch.load(files / "model.pt", map_location="cpu", weights_only=True)
    args = saved["model_args"] | model_args
    model = GPT(GPTConfig(**args))
    if not model_args:
        model.load_state_dict(saved["state_dict"])
    from foundry.pretrain.shards import load_split

    change(model, np.asarray(load_split(data_of(base, home).dir, "train"), dtype=np.int64))
    path = home / "specialists" / name / "model.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_model(path, args, model.state_dict(), tiny(), base.tags["data_version"])
    run = tracking.client().create_run(tracking.experiment_id("foundry"), run_name=f"specialist {name}")
    uri = log_model(run.info.run_id, path, files / "tokenizer.json")
    tracking.client().log_dict(run.info.run_id, recorded_config(base), "config.json")  # as a training run records it
    tags = {k: base.tags[k] for k in ("data_version", "data.remote")} | {"parent_model": base_uri}
    return versions.publish(uri, name, run.info.run_id, tags, True, f"a specialist of {base_uri}").version


def train_more(seed: int, steps: int = 15):
    def change(model, tokens):
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        block = model.config.block_size
        for _ in range(steps):
            starts = torch.randint(0, len(tokens) - block - 1, (8,), generator=generator).tolist()
            rows = torch.from_numpy(np.stack([tokens[s : s + block + 1] for s in starts]))
            optimizer.zero_grad()
            model(rows[:, :-1], rows[:, 1:])[1].backward()
            optimizer.step()

    return change


def spoil(model, _tokens):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))


@pytest.fixture(scope="module")
def base_uri(base_model) -> str:
    return base_model[1].model_uri


@pytest.fixture(scope="module")
def specialists(base_uri, foundry_home):
    for name, change in (("mg-a", train_more(1)), ("mg-b", train_more(2)), ("mg-spoilt", spoil)):
        register_specialist(name, foundry_home, base_uri, change)
    return "models:/mg-a/1", "models:/mg-b/1", "models:/mg-spoilt/1"


def test_a_merge_of_two_specialists_passes_the_gate_and_records_every_parent(specialists, base_uri, prefect_harness):
    from flows.merge import merge
    from foundry.registry.lineage import format_lineage, lineage
    from foundry.reports.summaries import merge_summary

    a, b, _ = specialists
    result = merge(models=[a, "models:/mg-b@champion"], config=tiny("merge.method=linear", "merge.model_name=mg-ab"))
    assert result.parents == [a, b] and result.base == base_uri  # the common ancestor, found in their lineage
    assert result.decision.passed and result.promoted, result.decision.verdict
    on_a, on_b, on_base = result.decision.inputs.scores
    assert [s.holdout_of for s in result.decision.inputs.scores] == [a, b, base_uri]
    assert on_a.merged_bits_per_byte < on_a.base_bits_per_byte and on_base.specialist_bits_per_byte is None
    assert on_a.merged_bits_per_byte - on_a.specialist_bits_per_byte <= 0.05

    version = tracking.client().get_model_version("mg-ab", result.model_version)
    assert version.tags["parent_model"] == f"{a},{b}" and version.tags["merge.base"] == base_uri
    assert json.loads(version.tags["merge.recipe"])["method"] == "linear"
    assert "## Recipe (no training)" in version.description and f"{a} x 1.0" in version.description
    chain = lineage(result.model_uri)
    assert [record.model for record in chain] == [result.model_uri, a, base_uri, b]  # every parent, their base once
    # A reviewer's tags only: the config is the run's, the scores are metrics, the packages the run's tags.
    assert "config" not in version.tags and not [k for k in version.tags if k.startswith(("holdout/", "version."))]
    run_git = tracking.run_git(tracking.client().get_run(result.run_id).data.tags)
    assert version.tags["git_commit"] == run_git["git_commit"] != "unknown"
    assert chain[0].holdout_bits_per_byte == f"{on_base.merged_bits_per_byte:.6f}"  # a metric of the merge run
    text = format_lineage(chain)
    assert f"code     commit {run_git['git_commit']}" in text and '"method": "linear"' in text
    heads = [line for line in text.splitlines() if line.lstrip().startswith("models:/")]
    indents = {line.split()[0]: len(line) - len(line.lstrip()) for line in heads}
    assert indents == {result.model_uri: 0, a: 2, b: 2, base_uri: 4}  # the parents side by side, their base below
    metrics = tracking.client().get_run(result.run_id).data.metrics
    assert metrics["holdout.mg-a_v1/merged_bits_per_byte"] == pytest.approx(on_a.merged_bits_per_byte)
    flow_run, artifacts = run_page(result.run_id)
    assert flow_run.name == "merge-linear"
    assert merge_summary(result) in artifacts["pipeline-summary"].data  # what `foundry merge` prints
    assert f"/runs/{result.run_id}" in artifacts["mlflow-run"].data
    assert f"/models/mg-ab/versions/{result.model_version}" in artifacts["model-version"].data


def test_a_merge_worse_than_the_base_is_refused_through_the_cli(specialists, prefect_harness, capsys):
    from foundry.cli import main

    a, _, spoilt = specialists
    config = str(REPO_ROOT / "configs" / "tiny.yaml")
    argv = ["merge", a, spoilt, "--config", config, "--method", "ties", "--set", "merge.model_name=mg-bad"]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "models:/mg-bad/1  (alias: challenger; on models:/mg-a/1's holdout" in out
    version = tracking.client().get_model_version("mg-bad", "1")
    assert version.tags["gate.passed"] == "false" and version.aliases == ["challenger"]
    assert "does not beat the base's" in version.tags["gate.verdict"]


def test_a_base_that_is_not_the_common_ancestor_or_another_architecture_is_refused(
    specialists, base_uri, prefect_harness, foundry_home
):
    from flows.merge import merge
    from models.merge import MergeRefused

    a, b, _ = specialists
    with pytest.raises(MergeRefused, match=rf"base {a} is not the common ancestor .* \({base_uri}\)"):
        merge(models=[a, b], config=tiny(f"merge.base={a}", "merge.model_name=mg-refused"))
    wide = f"models:/mg-wide/{register_specialist('mg-wide', foundry_home, base_uri, lambda m, t: None, n_layer=2)}"
    with pytest.raises(
        MergeRefused,
        match=rf"cannot merge {wide} with {base_uri}: they differ at model_args\['n_layer'\] \(2 vs 1\)",
    ):
        merge(models=[a, wide], config=tiny("merge.model_name=mg-refused"))
    assert tracking.client().search_model_versions("name='mg-refused'") == []


def test_each_parent_is_scored_on_its_own_holdout(specialists, base_uri, base_model, prefect_harness):
    """A real fine-tune on another corpus has its own data version: the merge scores it there, with the
    specialist's own figure, and the other parent on the base's holdout."""
    from flows.finetune import finetune
    from flows.merge import merge

    a, _, _ = specialists
    steps = ["train.max_steps=10", "train.warmup_steps=2", "train.val_every_n_steps=10"]
    config = tiny("data.source=stdlib://importlib", "finetune.model_name=mg-importlib", *steps, *NO_BASELINES)
    domain = finetune(model=base_uri, config=config)
    result = merge(models=[a, domain.model_uri], config=tiny("merge.method=linear", "merge.model_name=mg-mixed"))
    on_a, on_domain, on_base = result.decision.inputs.scores
    assert [s.holdout_of for s in result.decision.inputs.scores] == [a, domain.model_uri, base_uri]
    base_data = base_model[1].data_version
    assert on_a.data_version == on_base.data_version == base_data  # mg-a records the base's data
    assert on_domain.data_version == domain.data_version != base_data
    assert on_domain.specialist_bits_per_byte == pytest.approx(domain.metrics.bits_per_byte, rel=1e-4)
    assert on_domain.base_bits_per_byte != pytest.approx(on_a.base_bits_per_byte)  # another holdout, another score
