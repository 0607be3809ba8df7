"""What `foundry evaluate` shows: one comparison as markdown (the CLI prints it, the flow publishes it), the same
rows for a Prefect table artifact, and a chart; each as the data's workload reports it (`Scoring`: bits per byte
on documents, exact match on chat records, accuracy on images), from the helpers here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from foundry.evaluate.scores import Evaluation, EvaluationData, ModelScores
from foundry.evaluate.scoring import scoring_of


def name_of(scores: ModelScores) -> str:
    """A model as the table names it: its version, and the URI asked for when that was an alias."""
    ref = scores.model
    return ref.model if ref.asked == ref.model else f"{ref.model} ({ref.asked})"


def markdown(table: list[dict[str, str]], numeric_from: int = 1) -> str:
    """A GitHub-style table; columns from `numeric_from` on are right-aligned."""
    header = list(table[0])
    align = ["---" if i < numeric_from else "---:" for i in range(len(header))]
    lines = [header, align, *([row.get(key, "") for key in header] for row in table)]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def head(evaluation: Evaluation, table: list[dict[str, str]], holdout: str, kind: str = "") -> list[str]:
    """The comparison's opening, alike for every workload: how many models on which data (and of what `kind`),
    the holdout's size, then the overall `table`."""
    n, of = len(evaluation.models), f" ({kind})" if kind else ""
    return [
        f"evaluate: {n} model{'s' * (n != 1)} on {evaluation.data.label}{of}",
        f"holdout: {holdout}",
        "",
        markdown(table),
        "",
    ]


def best(models: list[ModelScores], figure: Callable[[ModelScores], float], shown: str, lowest: bool = False) -> str:
    """The flow's one-line outcome: the model whose `figure` is highest (`lowest`: lowest), with the figure as
    `shown` formats it (`"accuracy {:.4f}"`)."""
    chosen = (min if lowest else max)(models, key=figure)
    return f"best: {chosen.model.model} at {shown.format(figure(chosen))}"


def runs_lines(evaluation: Evaluation) -> list[str]:
    runs = [f"{name_of(m)}: MLflow run {m.run_id}" for m in evaluation.models if m.run_id]
    return ["", f"evaluation run {evaluation.run_id}", *runs] if evaluation.run_id else []


def rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """The overall comparison, one row per model then per baseline, best first within each: the table
    artifact's rows and the markdown's."""
    return scoring_of(evaluation.data).rows(evaluation)


def comparison(evaluation: Evaluation) -> str:
    """The text `foundry evaluate` prints and the flow's summary."""
    return scoring_of(evaluation.data).comparison(evaluation)


def outcome(evaluation: Evaluation) -> str:
    """The flow's one-line outcome: the best model."""
    return scoring_of(evaluation.data).outcome(evaluation)


def headline(scores: ModelScores, data: EvaluationData) -> str:
    """One model's figure on the data, for a log line."""
    return scoring_of(data).headline(scores)


def chart(evaluation: Evaluation, path: Path) -> Path | None:
    """The comparison as one PNG (None on chat records)."""
    return scoring_of(evaluation.data).chart(evaluation, path)
