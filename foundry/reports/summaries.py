"""What each command prints when its flow ends; the flow's run page shows the same text as its summary
artifact."""

from __future__ import annotations

from pathlib import Path

from foundry.core.contracts import AlignResult, PipelineResult, Reproduction, SearchResult, SkippedRun
from foundry.core.energy import RunEnergy
from foundry.core.model_uri import ModelUri
from foundry.specialists.contracts import MergeResult


def _rule(title: str) -> str:
    return f"── {title} ".ljust(70, "─")


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _energy_lines(energy: RunEnergy) -> list[str]:
    """The run's energy, then each stage's, under the label `energy`; none when nothing was measured."""
    if not energy.stages:
        return []
    return [f"{'energy' if i == 0 else '':10s} {line}" for i, line in enumerate(energy.lines())]


def align_summary(result: AlignResult) -> str:
    status = "champion" if result.promoted else "challenger"
    return "\n".join(
        [
            _rule(f"Foundry alignment ({result.method}) finished"),
            f"model      {result.model_uri}  (alias: {status})",
            f"parent     {result.parent}",
            f"data       version {result.data_version}",
            f"gate       {result.verdict}",
            f"MLflow run {result.run_id}",
            *(
                f"  {measure:26s} base {_or_nan(base):.4f}  aligned {aligned:.4f}"
                for measure, (base, aligned) in result.metrics.compared().items()
            ),
            *_energy_lines(result.energy),
        ]
    )


def merge_summary(result: MergeResult) -> str:
    status = "champion" if result.promoted else "challenger"
    lines = [
        _rule("Foundry merge finished"),
        f"model      {result.model_uri}  (alias: {status}; {result.decision.verdict})",
        f"recipe     {result.method} of {', '.join(result.parents)} onto {result.base}",
        "holdout of                        merged    base  specialist  (bits/byte)",
    ]
    for s in result.decision.inputs.scores:
        own = "-" if s.specialist_bits_per_byte is None else f"{s.specialist_bits_per_byte:.4f}"
        lines.append(f"{s.holdout_of:32s} {s.merged_bits_per_byte:7.4f} {s.base_bits_per_byte:7.4f} {own:>11s}")
    lines.append(f"MLflow run {result.run_id}")
    return "\n".join(lines)


def search_summary(result: SearchResult) -> str:
    counts = ", ".join(f"{n} {state}" for state, n in sorted(result.counts.items())) or "no trials"
    if result.best_number is None:
        best = ["none (no trial completed)"]
    else:
        best = [f"trial {result.best_number}: {result.best_value:.4f} bits per byte on the holdout"]
        best += [f"{key} = {value}" for key, value in result.best_params.items()]
    lines = [
        _rule("Foundry search finished"),
        f"study      {result.study_name}  ({counts})",
        f"storage    {result.storage}",
        *(f"{'best' if i == 0 else '':10s} {line}" for i, line in enumerate(best)),
        f"config     {result.best_config or '-'}",
        f"MLflow run {result.run_id}  (one nested run per trial; table and plots under search/)",
    ]
    if result.best_config:
        lines.append(f"train it   foundry run --config {result.best_config}")
    return "\n".join(lines)


def reproduce_summary(result: Reproduction) -> str:
    forced = [] if result.commit_matches else ["at a different commit"]
    forced += [] if result.tree_clean else ["with uncommitted code"]
    lines = [
        f"reproduced {result.model} in MLflow run {result.run_id}"
        + (f" ({', '.join(forced)}, forced)" if forced else "")
    ]
    lines += [f"  {key:24s} recorded {old:.6f}  reproduced {new:.6f}" for key, (old, new) in result.comparison.items()]
    lines.append("identical holdout metrics" if result.identical else "holdout metrics DIFFER from the recorded ones")
    return "\n".join(lines)


def skipped_summary(result: SkippedRun) -> str:
    return f"retrain: {result.reason}; nothing trained (MLflow run {result.run_id})"


def pipeline_summary(result: PipelineResult, home: Path) -> str:
    """What `foundry run` prints at the end, and the run page's summary artifact shows; what the holdout and the
    baselines gave, as the metrics' own type puts them (`summary_rows`)."""
    status = "champion" if result.promoted else "challenger"
    loadable = (
        str(ModelUri(name=result.model_name, alias="champion")) if result.promoted else result.model_uri
    )  # refused: no alias
    return "\n".join(
        [
            "── Foundry pipeline finished ─────────────────────────────────────────",
            f"model      {result.model_uri}  (alias: {status}; {result.verdict})",
            f"data       version {result.data_version}",
            *(f"{label:10s} {line}" for label, line in result.metrics.summary_rows()),
            *_energy_lines(result.energy),
            f"MLflow run {result.run_id}",
            f"MLflow UI  .venv/bin/mlflow ui --backend-store-uri sqlite:///{home}/mlflow/mlflow.db --host 127.0.0.1 "
            "--port 5000",
            f"Prefect UI PREFECT_HOME={home}/prefect .venv/bin/prefect server start --host 127.0.0.1 --port 4200",
            f'load it    mlflow.pyfunc.load_model("{loadable}")',
        ]
    )
