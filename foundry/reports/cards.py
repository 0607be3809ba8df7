"""The model cards on the registry page (trained, aligned and merged versions) and the evaluation table in them."""

from __future__ import annotations

import pandas as pd

from foundry.config import FoundryConfig, TrainConfig
from foundry.core.metrics.aligned import AlignmentMetrics
from foundry.core.metrics.holdout import HoldoutMetrics, window_stride
from foundry.core.model_uri import ModelUri
from foundry.core.redact import redact_url
from foundry.core.version_tags import VersionTags
from foundry.data.manifest import DatasetManifest
from foundry.gates.decision import Decision


def summary_table(
    metrics: HoldoutMetrics, champion_bpb: float | None, decision: Decision | None = None
) -> pd.DataFrame:
    """Bits per byte on the holdout for the model, its baselines and the champion (same holdout); for a
    fine-tune, its base and the specialist's own champion instead."""
    rows = [{"model": "this model", "bits_per_byte": metrics.bits_per_byte}]
    strongest = metrics.strongest_baseline()
    rows += [
        {"model": metrics.baseline_label(name, strongest=(name, value) == strongest), "bits_per_byte": value}
        for name, value in metrics.baselines().items()
    ]
    gate = decision.inputs if decision is not None else None
    base = getattr(gate, "base", "")  # a fine-tune's base: its scores are the `champion_*` ones
    if champion_bpb is not None:
        rows.append({"model": f"base {base}" if base else "current champion", "bits_per_byte": champion_bpb})
    if getattr(gate, "incumbent_bits_per_byte", None) is not None:
        label = f"specialist's champion v{gate.incumbent_version}"
        rows.append({"model": label, "bits_per_byte": gate.incumbent_bits_per_byte})
    return pd.DataFrame(rows)


def absent_note(metrics: HoldoutMetrics) -> str:
    """The baselines asked for but absent, as a sentence after the strongest one's; empty when none is."""
    return f" {metrics.absent_line()}" if metrics.absent_baselines else ""


def forgetting(decision: Decision) -> str:
    """The champion's own holdout, both models on it: what the challenger may have forgotten."""
    gate = decision.inputs
    old, base = gate.old_holdout, getattr(gate, "base", "")
    if old is None:
        return "No champion to compare with: nothing to forget."
    whose, who = (
        (f"base's ({base})", "the base")
        if base
        else (
            f"champion's (v{gate.champion_version})",
            "the champion",
        )
    )
    return (
        f"On the {whose} own holdout, data version `{old.data_version}`: "
        f"this model {old.challenger_bits_per_byte:.4f}, {who} {old.champion_bits_per_byte:.4f} bits/byte; "
        f"{'worse' if old.regression > 0 else 'better'} by {abs(old.regression):.4f}, "
        f"{'more than' if old.forgets else 'within'} the {old.max_regression} allowed."
    )


def steps_line(t: TrainConfig, block_size: int) -> str:
    ramp = f" (the first {t.ramp_steps} growing from {t.batch_ramp_rows} rows)" if t.ramp_steps else ""
    mean = f", the weights the mean of the last {t.averaged_steps} steps'" if t.averaged_steps else ""
    return f"{t.max_steps} steps of {t.batch_size} x {block_size} tokens{ramp}{mean}"


def windows_line(overlap: float, block_size: int) -> str:
    """How the holdout was read (`evaluation.window_overlap`): the same model scores lower with more context."""
    if overlap == 0:
        return f"read in non-overlapping {block_size}-token windows"
    context = block_size - window_stride(block_size, overlap)
    return (
        f"read in {block_size}-token windows, each repeating the last {context} tokens of the one before as context "
        f"(evaluation.window_overlap {overlap:g}), each token scored once"
    )


def optimizer_line(t: TrainConfig) -> str:
    if t.uses_muon:
        return f"Muon at peak learning rate {t.muon_learning_rate} for the blocks' matrices, AdamW at {t.learning_rate}"
    return f"AdamW, peak learning rate {t.learning_rate}"


def run_line(tags: VersionTags) -> str:
    """The run and the commit a version's tags record, as a card's line."""
    commit = "unknown" if tags.git_commit is None else tags.git_commit
    dirty = "unknown" if tags.git_dirty is None else tags.git_dirty
    return f"- MLflow run `{tags.run_id}`, git commit `{commit}` (dirty: {dirty})"


def data_line(tags: VersionTags) -> str:
    return f"version `{tags.data_version}` in `{tags.data_remote}`"


def model_card(
    config: FoundryConfig,
    manifest: DatasetManifest,
    metrics: HoldoutMetrics,
    decision: Decision,
    n_params: int,
    tags: VersionTags,
) -> str:
    """Markdown for the model version's description in the MLflow registry; `tags` the version's own (its run,
    data and commit)."""
    m, name = config.model, config.registry.model_name
    table = summary_table(metrics, decision.inputs.champion_bits_per_byte, decision)
    rows = "\n".join(f"| {r.model} | {r.bits_per_byte:.4f} |" for r in table.itertuples())
    return f"""# {name}: GPT, {n_params / 1e6:.2f}M parameters

**Verdict:** {decision.verdict}

## Holdout (bits per byte, lower is better)
| model | bits/byte |
|---|---|
{rows}

Strongest baseline: {metrics.strongest_baseline_line() or "none measured."}{absent_note(metrics)}

Loss {metrics.loss:.4f} nats/token, perplexity {metrics.perplexity:.2f}, on {metrics.tokens} holdout tokens, {windows_line(config.evaluation.window_overlap, m.block_size)}.

## Forgetting guard
{forgetting(decision)}

## Data
- {data_line(tags)}
- source `{redact_url(manifest.source)}` (manifest digest `{manifest.source_digest[:16]}`)
- {manifest.count("train_docs")} train / {manifest.count("holdout_docs")} holdout documents; {manifest.train_tokens} / {manifest.holdout_tokens} tokens; BPE vocabulary {manifest.vocab_size}

## Model and training
- {m.n_layer} layers, {m.n_head} heads, width {m.n_embd}, context {m.block_size}, {m.positions} positions, dropout {m.dropout}{f", a {m.bigram_buckets}-row bigram table" if m.bigram_buckets else ""}{", QK-norm" if m.qk_norm else ""}{", ReLU-squared MLP" if m.mlp_activation == "relu2" else ""}{", value embeddings" if m.value_embeddings else ""}{f", trained to predict {m.mtp_depth} more token(s) ahead" if m.mtp_depth else ""}
- {steps_line(config.train, m.block_size)} on {config.train.num_nodes * config.train.devices} process(es), {optimizer_line(config.train)}
{run_line(tags)}

## Use
```python
import mlflow, pandas as pd
model = mlflow.pyfunc.load_model("{ModelUri(name=name, alias="champion")}")
model.predict(pd.DataFrame({{"prompt": ["def "]}}), params={{"max_new_tokens": 64}})
```
"""


def alignment_card(
    config: FoundryConfig, manifest: DatasetManifest, metrics: AlignmentMetrics, decision, tags: VersionTags
) -> str:
    """Markdown for an aligned version's description: the base (`tags.parent_model`) beside it on the same
    held-out data."""
    a = config.align
    rows = "\n".join(
        f"| {measure} | {float('nan') if base is None else base:.4f} | {aligned:.4f} |"
        for measure, (base, aligned) in metrics.compared().items()
    )
    name = config.registry.model_name
    return f"""# {name}: {a.method.upper()} of {tags.parent_model}

**Verdict:** {decision.verdict}

## Held-out alignment data and the base's pretraining holdout
| measure | base | this model |
|---|---|---|
{rows}

## Data and training
- {manifest.kind} records, {data_line(tags)}: {manifest.count("train_records")} train / {manifest.count("holdout_records")} held out
- {config.train.max_steps} steps of {config.train.batch_size} {"packed rows" if a.method == "sft" else "pairs"}, peak learning rate {config.train.learning_rate}{f", beta {a.beta}, sft weight {a.sft_weight}" if a.method == "dpo" else ""}
{run_line(tags)}

## Use
```python
import mlflow, pandas as pd
model = mlflow.pyfunc.load_model("{ModelUri(name=name, alias="champion")}")
model.predict(pd.DataFrame({{"messages": [[{{"role": "user", "content": "Add: 2 + 3"}}]]}}))
```
"""


def merge_card(name: str, recipe: dict, decision: Decision, n_params: int, run_id: str) -> str:
    """Markdown for the merged version's description in the registry: the recipe, the scores, the verdict."""
    rows = "\n".join(
        f"| {s.holdout_of} | {s.data_version[:12]} | {s.merged_bits_per_byte:.4f} | {s.base_bits_per_byte:.4f} | "
        f"{'-' if s.specialist_bits_per_byte is None else f'{s.specialist_bits_per_byte:.4f}'} |"
        for s in decision.inputs.scores
    )
    weights = ", ".join(f"{uri} x {w}" for uri, w in zip(recipe["models"], recipe["weights"]))
    return f"""# {name}: a {recipe["method"]} merge, {n_params / 1e6:.2f}M parameters

**Verdict:** {decision.verdict}

## Recipe (no training)
- method `{recipe["method"]}`, base `{recipe["base"]}`
- models and weights: {weights}
- density {recipe["density"]}, scale (lambda) {recipe["scale"]}, seed {recipe["seed"]}

## Holdouts (bits per byte, lower is better)
| holdout of | data | merged | base | specialist |
|---|---|---|---|---|
{rows}

MLflow run `{run_id}`. Reproduce: `foundry merge {" ".join(recipe["models"])} --method {recipe["method"]} --base {recipe["base"]}` with the same weights, density, scale and seed.
"""
