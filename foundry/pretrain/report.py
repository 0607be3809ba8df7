"""`foundry evaluate` on documents, reported: bits per byte of each model beside the baselines, overall and per
group of source files, as markdown, table rows and a bar chart.

Loss and perplexity are per token of each model's own tokenizer, so they appear only when every model shares
one; bits per byte always do (the holdout's UTF-8 bytes are the same whoever reads them).
"""

from __future__ import annotations

from pathlib import Path

from foundry.core.metrics.holdout import HoldoutMetrics, absent_line
from foundry.evaluate.report import head, markdown, name_of, runs_lines
from foundry.evaluate.scores import Evaluation
from foundry.pretrain.group_baselines import GROUP_BASELINES

GROUP_BASELINES_NOTE = (
    "Each group's baselines are scored on its holdout text alone, given the same training text as overall; "
    "xz, xz -9e and zpaq are scored overall only."
)
DIFFERENT_TOKENIZERS = (
    "The models use different tokenizers: they compare in bits per byte only (loss and perplexity are per token "
    "of each model's own tokenizer, logged on each model's run)."
)


def baseline_label(name: str, evaluation: Evaluation) -> str:
    label = HoldoutMetrics.LABELS[name]
    given = name in HoldoutMetrics.STRONG
    return f"{label} (given {evaluation.baselines.train_bytes:,} train bytes)" if given else label


def strongest(evaluation: Evaluation) -> tuple[str, float] | None:
    """The baseline with the fewest bits per byte, by name; None when none was scored."""
    scores = evaluation.baselines.scores
    return min(scores.items(), key=lambda item: item[1]) if scores else None


def strongest_lines(evaluation: Evaluation) -> list[str]:
    """The strongest baseline and the best model against it, then the baselines asked for but absent; each a line
    under the table."""
    lines, found = [], strongest(evaluation)
    if found is not None and evaluation.models:
        name, value = found
        model = min(evaluation.models, key=lambda m: m.metrics.bits_per_byte)
        gap = model.metrics.bits_per_byte - value
        side = "behind" if gap > 0 else "ahead of"
        lines.append(
            f"strongest baseline: {baseline_label(name, evaluation)}, {value:.4f} bits/byte; the best model, "
            f"{name_of(model)}, is {abs(gap):.4f} bits/byte ({abs(gap) / value:.1%}) {side} it"
        )
    if evaluation.baselines.absent:
        lines.append(f"absent: {absent_line(evaluation.baselines.absent)}")
    return lines + ([""] if lines else [])


def rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """One row per model then per baseline, lowest bits per byte first within each."""
    with_loss = evaluation.one_tokenizer
    ranked = sorted(evaluation.models, key=lambda m: m.metrics.bits_per_byte)
    table = []
    for m in ranked:
        row = {"model": name_of(m), "bits_per_byte": f"{m.metrics.bits_per_byte:.4f}"}
        if with_loss:
            row |= {"loss": f"{m.metrics.loss:.4f}", "perplexity": f"{m.metrics.perplexity:.2f}"}
        table.append(row | {"tokens": f"{m.metrics.tokens:,}"})
    best = strongest(evaluation)
    for name, value in sorted(evaluation.baselines.scores.items(), key=lambda item: item[1]):
        label = baseline_label(name, evaluation) + (" (strongest baseline)" if (name, value) == best else "")
        row = {"model": f"baseline: {label}", "bits_per_byte": f"{value:.4f}"}
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


def comparison(evaluation: Evaluation) -> str:
    """Overall, then per group, then the runs."""
    held = f"{evaluation.holdout_bytes:,} bytes in {len(evaluation.groups)} group(s) of source files"
    opening = head(evaluation, rows(evaluation), held) + strongest_lines(evaluation)
    if not evaluation.one_tokenizer:
        opening += [DIFFERENT_TOKENIZERS, ""]
    groups = ["bits per byte by group of source files (top-level folder):", "", markdown(group_rows(evaluation), 1)]
    groups += ["", GROUP_BASELINES_NOTE]
    return "\n".join(opening + groups + runs_lines(evaluation))


def chart(evaluation: Evaluation, path: Path) -> Path:
    """Bits per byte of each model beside the baselines (and per group when there are several), one PNG."""
    from foundry.reports.plots import bits_per_byte_bars

    models = {name_of(m): m.metrics.bits_per_byte for m in evaluation.models}
    baselines = {baseline_label(k, evaluation): v for k, v in evaluation.baselines.scores.items()}
    groups = {
        group: {name_of(m): m.groups[group].bits_per_byte for m in evaluation.models if group in m.groups}
        for group in evaluation.groups
    }
    title = f"Bits per byte on {evaluation.data.label}"
    return bits_per_byte_bars(models, baselines, groups if len(groups) > 1 else {}, title, path)
