"""What `foundry evaluate` shows: one comparison as markdown (the CLI prints it, the flow publishes it), the same
rows for a Prefect table artifact, and a bar chart.

Loss and perplexity are per token of each model's own tokenizer, so they appear only when every model shares
one; bits per byte always do (the holdout's UTF-8 bytes are the same whoever reads them). On chat records the
table is exact match and response loss (`evaluate_chat`), and there is no chart. On images it is accuracy, macro
F1 and loss beside the majority and nearest-class-mean baselines, then accuracy per class, and the chart is accuracy.
"""

from __future__ import annotations

from pathlib import Path

from foundry.evaluate.baselines import GROUP_BASELINES
from foundry.evaluate.scores import Evaluation, ModelScores
from foundry.evaluation.holdout_metrics import HoldoutMetrics
from foundry.vision.metrics import VisionMetrics

CHAT_LOSS = (
    "Exact match: greedy replies through each model's chat template equal to the holdout's reference reply. "
    "Response loss is per assistant token of each model's own tokenizer."
)
GROUP_BASELINES_NOTE = (
    "Each group's baselines are scored on its holdout text alone, given the same training text as overall; "
    "xz and xz -9e are scored overall only."
)
DIFFERENT_TOKENIZERS = (
    "The models use different tokenizers: they compare in bits per byte only (loss and perplexity are per token "
    "of each model's own tokenizer, logged on each model's run)."
)


def name_of(scores: ModelScores) -> str:
    """A model as the table names it: its version, and the URI asked for when that was an alias."""
    ref = scores.model
    return ref.model if ref.asked == ref.model else f"{ref.model} ({ref.asked})"


def baseline_label(name: str, evaluation: Evaluation) -> str:
    label = HoldoutMetrics.LABELS[name]
    return f"{label} (given {evaluation.baselines.train_bytes:,} train bytes)" if name in ("xz9e", "ppmd") else label


def chat_rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """One row per model, the best exact match first, models that are not comparable last with the reason."""
    scored = [m for m in evaluation.models if m.chat and m.chat.exact_match is not None]
    table = []
    for m in sorted(scored, key=lambda m: -m.chat.exact_match):
        loss = "" if m.chat.response_loss is None else f"{m.chat.response_loss:.4f}"
        table.append({"model": name_of(m), "exact_match": f"{m.chat.exact_match:.4f}", "response_loss": loss})
        table[-1] |= {"records": f"{m.chat.records:,}", "note": ""}
    for m in evaluation.models:
        if m not in scored:
            note = m.chat.note if m.chat else ""
            table.append({"model": name_of(m), "exact_match": "", "response_loss": "", "records": "", "note": note})
    return table


def rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """The overall comparison, one row per model then per baseline, best first within each: the table
    artifact's rows and the markdown's."""
    if evaluation.data.kind == "chat":
        return chat_rows(evaluation)
    if evaluation.data.kind == "image":
        return image_rows(evaluation)
    with_loss = evaluation.one_tokenizer
    ranked = sorted(evaluation.models, key=lambda m: m.metrics.bits_per_byte)
    table = []
    for m in ranked:
        row = {"model": name_of(m), "bits_per_byte": f"{m.metrics.bits_per_byte:.4f}"}
        if with_loss:
            row |= {"loss": f"{m.metrics.loss:.4f}", "perplexity": f"{m.metrics.perplexity:.2f}"}
        table.append(row | {"tokens": f"{m.metrics.tokens:,}"})
    for name, value in sorted(evaluation.baselines.scores.items(), key=lambda item: item[1]):
        row = {"model": f"baseline: {baseline_label(name, evaluation)}", "bits_per_byte": f"{value:.4f}"}
        table.append(row | ({"loss": "", "perplexity": ""} if with_loss else {}) | {"tokens": ""})
    return table


def group_rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """Bits per byte per group of source files, one column per model (in the order asked), then one per baseline
    measured per group: the markdown's rows and the group table artifact's."""
    table, base = [], evaluation.baselines.groups
    for group in evaluation.groups:
        scored = [m.groups.get(group) for m in evaluation.models]
        size = next(g.bytes for g in scored if g is not None)
        row = {"group": group, "bytes": f"{size:,}"}
        row |= {name_of(m): f"{g.bits_per_byte:.4f}" if g else "" for m, g in zip(evaluation.models, scored)}
        found = base.get(group, {})
        row |= {
            f"baseline: {HoldoutMetrics.LABELS[name]}": f"{found[name]:.4f}" if name in found else ""
            for name in GROUP_BASELINES
        }
        table.append(row)
    return table


def markdown(table: list[dict[str, str]], numeric_from: int = 1) -> str:
    """A GitHub-style table; columns from `numeric_from` on are right-aligned."""
    header = list(table[0])
    align = ["---" if i < numeric_from else "---:" for i in range(len(header))]
    lines = [header, align, *([row.get(key, "") for key in header] for row in table)]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def comparison(evaluation: Evaluation) -> str:
    """The text `foundry evaluate` prints and the flow's summary: overall, then per group, then the runs."""
    data = evaluation.data
    n = len(evaluation.models)
    if data.kind == "chat":
        return chat_comparison(evaluation)
    if data.kind == "image":
        return image_comparison(evaluation)
    head = [
        f"evaluate: {n} model{'s' * (n != 1)} on {data.label}",
        f"holdout: {evaluation.holdout_bytes:,} bytes in {len(evaluation.groups)} group(s) of source files",
        "",
        markdown(rows(evaluation)),
        "",
    ]
    if not evaluation.one_tokenizer:
        head += [DIFFERENT_TOKENIZERS, ""]
    groups = ["bits per byte by group of source files (top-level folder):", "", markdown(group_rows(evaluation), 1)]
    groups += ["", GROUP_BASELINES_NOTE]
    return "\n".join(head + groups + runs_lines(evaluation))


def runs_lines(evaluation: Evaluation) -> list[str]:
    runs = [f"{name_of(m)}: MLflow run {m.run_id}" for m in evaluation.models if m.run_id]
    return ["", f"evaluation run {evaluation.run_id}", *runs] if evaluation.run_id else []


def chat_comparison(evaluation: Evaluation) -> str:
    n, data = len(evaluation.models), evaluation.data
    head = [
        f"evaluate: {n} model{'s' * (n != 1)} on {data.label} (chat records)",
        f"holdout: {evaluation.holdout_records:,} conversations",
        "",
        markdown(rows(evaluation)),
        "",
        CHAT_LOSS,
    ]
    return "\n".join(head + runs_lines(evaluation))


def outcome(evaluation: Evaluation) -> str:
    """The flow's one-line outcome: the best model."""
    if evaluation.data.kind == "chat":
        scored = [m for m in evaluation.models if m.chat and m.chat.exact_match is not None]
        if not scored:
            return "no model could be compared on chat records"
        best = max(scored, key=lambda m: m.chat.exact_match)
        return f"best: {best.model.model} at exact match {best.chat.exact_match:.4f}"
    if evaluation.data.kind == "image":
        best = max(evaluation.models, key=lambda m: m.vision.accuracy)
        return f"best: {best.model.model} at accuracy {best.vision.accuracy:.4f}"
    best = min(evaluation.models, key=lambda m: m.metrics.bits_per_byte)
    return f"best: {best.model.model} at {best.metrics.bits_per_byte:.4f} bits/byte"


def headline(scores: ModelScores) -> str:
    """One model's figure for a log line."""
    if scores.chat is not None:
        c = scores.chat
        return c.note if c.exact_match is None else f"exact match {c.exact_match:.4f} on {c.records} conversations"
    if scores.vision is not None:
        return f"accuracy {scores.vision.accuracy:.4f} on {scores.vision.images} images"
    return f"{scores.metrics.bits_per_byte:.4f} bits/byte"


def chart(evaluation: Evaluation, path: Path) -> Path | None:
    """Bits per byte of each model beside the baselines (and per group when there are several), one PNG; None
    on chat records."""
    if evaluation.data.kind == "chat":
        return None
    if evaluation.data.kind == "image":
        return image_chart(evaluation, path)
    from foundry.reports.plots import bits_per_byte_bars

    models = {name_of(m): m.metrics.bits_per_byte for m in evaluation.models}
    baselines = {baseline_label(k, evaluation): v for k, v in evaluation.baselines.scores.items()}
    groups = {
        group: {name_of(m): m.groups[group].bits_per_byte for m in evaluation.models if group in m.groups}
        for group in evaluation.groups
    }
    title = f"Bits per byte on {evaluation.data.label}"
    return bits_per_byte_bars(models, baselines, groups if len(groups) > 1 else {}, title, path)


# --- images: accuracy (higher is better), per class ---------------------------------------------


def image_rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """One row per model, the most accurate first, then the baselines."""
    table = []
    for m in sorted(evaluation.models, key=lambda m: -m.vision.accuracy):
        v = m.vision
        row = {"model": name_of(m), "accuracy": f"{v.accuracy:.4f}", "macro_f1": f"{v.macro_f1:.4f}"}
        table.append(row | {"loss": f"{v.loss:.4f}", "images": f"{v.images:,}"})
    for name, value in sorted(evaluation.baselines.scores.items(), key=lambda item: -item[1]):
        row = {"model": f"baseline: {VisionMetrics.LABELS[name]}", "accuracy": f"{value:.4f}"}
        table.append(row | {"macro_f1": "", "loss": "", "images": ""})
    return table


def class_rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """Accuracy on each holdout class, one column per model (in the order asked)."""
    classes: dict[str, None] = {}
    for m in evaluation.models:
        classes.update(dict.fromkeys(m.vision.per_class_accuracy))
    table = []
    for label in classes:
        row = {"class": label}
        for m in evaluation.models:
            found = m.vision.per_class_accuracy.get(label)
            row[name_of(m)] = "" if found is None else f"{found:.4f}"
        table.append(row)
    return table


def image_comparison(evaluation: Evaluation) -> str:
    n, data = len(evaluation.models), evaluation.data
    head = [
        f"evaluate: {n} model{'s' * (n != 1)} on {data.label} (images)",
        f"holdout: {evaluation.holdout_records:,} images",
        "",
        markdown(rows(evaluation)),
        "",
        "accuracy by class:",
        "",
        markdown(class_rows(evaluation)),
    ]
    return "\n".join(head + runs_lines(evaluation))


def image_chart(evaluation: Evaluation, path: Path) -> Path:
    from foundry.reports.plots import accuracy_bars

    models = {name_of(m): m.vision.accuracy for m in evaluation.models}
    baselines = {f"baseline: {VisionMetrics.LABELS[k]}": v for k, v in evaluation.baselines.scores.items()}
    return accuracy_bars(models, baselines, f"Accuracy on {evaluation.data.label}", path)
