"""An image classifier's model card and evaluation table: accuracy (higher is better) beside the baselines and
the champion, per-class accuracy, the forgetting guard, the data and the way to call it."""

from __future__ import annotations

import pandas as pd

from foundry.core.metrics.images import VisionMetrics
from foundry.core.model_uri import ModelUri
from foundry.core.version_tags import VersionTags
from foundry.gates.decision import Decision
from foundry.reports.cards import data_line, run_line


def vision_summary_table(metrics: VisionMetrics, decision: Decision | None = None) -> pd.DataFrame:
    """Holdout accuracy of the model, its baselines and the champion (same holdout)."""
    rows = [{"model": "this model", "accuracy": metrics.accuracy}]
    strongest = metrics.strongest_baseline()
    for name, value in metrics.baselines().items():
        label = VisionMetrics.LABELS[name] + (" (strongest baseline)" if (name, value) == strongest else "")
        rows.append({"model": label, "accuracy": value})
    inputs = decision.inputs if decision is not None else None
    champion = getattr(inputs, "champion_accuracy", None)
    fine_tune = getattr(inputs, "gate", "") == "image_specialist"  # its `champion_*` are its base's
    if champion is not None:
        rows.append({"model": f"base ({inputs.base})" if fine_tune else "current champion", "accuracy": champion})
    if getattr(inputs, "incumbent_accuracy", None) is not None:
        rows.append(
            {"model": f"specialist's champion v{inputs.incumbent_version}", "accuracy": inputs.incumbent_accuracy}
        )
    return pd.DataFrame(rows)


def forgetting_line(decision: Decision) -> str:
    old = decision.inputs.old_holdout
    if old is None:
        return "No champion to compare with: nothing to forget."
    whose = "base" if decision.inputs.gate == "image_specialist" else "champion"
    return (
        f"On the {whose}'s (v{decision.inputs.champion_version}) own holdout, data version `{old.data_version}`: "
        f"this model {old.challenger_accuracy:.4f}, the {whose} {old.champion_accuracy:.4f} accuracy; "
        f"{'worse' if old.regression > 0 else 'better'} by {abs(old.regression):.4f}, "
        f"{'more than' if old.forgets else 'within'} the {old.max_regression} allowed."
    )


def vision_card(
    name: str,
    saved: dict,
    metrics: VisionMetrics,
    decision: Decision,
    n_params: int,
    tags: VersionTags,
) -> str:
    """Markdown for an image classifier's version description; `saved` is its model.pt's dict (weights aside),
    `tags` the version's own (its run, data and commit)."""
    args, image = saved["model_args"], saved["image"]
    table = vision_summary_table(metrics, decision)
    rows = "\n".join(f"| {r.model} | {r.accuracy:.4f} |" for r in table.itertuples())
    classes = "\n".join(f"| {label} | {acc:.4f} |" for label, acc in metrics.per_class_accuracy.items())
    return f"""# {name}: image classifier ({args["arch"]}), {n_params / 1e6:.2f}M parameters

**Verdict:** {decision.verdict}

## Holdout (accuracy, higher is better)
| model | accuracy |
|---|---|
{rows}

Macro F1 {metrics.macro_f1:.4f}, loss {metrics.loss:.4f} nats/image, on {metrics.images} holdout images.

| class | accuracy |
|---|---|
{classes}

## Forgetting guard
{forgetting_line(decision)}

## Data and model
- {data_line(tags)}; {len(saved["classes"])} classes
- images fitted to {image["size"]}x{image["size"]} ({image["mode"]}, channels {image["channels"]}); {args["in_channels"]} channel(s) in
{run_line(tags)}

## Use
```python
import mlflow, pandas as pd
model = mlflow.pyfunc.load_model("{ModelUri(name=name, alias="champion")}")
model.predict(pd.DataFrame({{"image": [open("picture.png", "rb").read()]}}))  # label, probability, probabilities
```
"""
