"""What `foundry evaluate` asks of a workload (`Workload.scoring()`): how its registered models are scored on a
holdout, which baselines stand beside them, and how the comparison is reported and logged. The steps
(`foundry.evaluate.steps`), the runs (`runs`) and the report (`report`) ask the data's workload and never branch on
what the data holds; each workload's answer lives in its own folder (`foundry.pretrain.scoring`,
`foundry.align.scoring`, `foundry.vision.scoring`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from foundry.config import FoundryConfig
from foundry.core.contracts import RunContext, SourceManifest
from foundry.core.workload import named
from foundry.evaluate.scores import Baselines, Evaluation, EvaluationData, ModelRef, ModelScores

STAGING = "prepared"  # under the run's folder: removed with the run's other staging when it fails
BASELINE = "eval/baseline/"  # the baselines' MLflow keys: `eval/baseline/<name>_<unit>`


@dataclass
class Source:
    """A source (`config.data.source`, see `evaluate.source_config`) to prepare for one evaluation, with the
    models it is prepared for; listed and fingerprinted as text once, by the first workload that asks."""

    config: FoundryConfig
    refs: list[ModelRef]
    run: RunContext

    @property
    def staging(self) -> Path:
        return self.run.dir / STAGING

    @cached_property
    def acquired(self) -> SourceManifest:
        from foundry.data.acquire import acquire_source

        self.run.dir.mkdir(parents=True, exist_ok=True)
        return acquire_source(self.config.data, self.run.dir / "source_manifest.json")


@dataclass(frozen=True)
class Table:
    """A table artifact beside the comparison: its key, its rows and what it shows."""

    key: str
    rows: list[dict[str, str]]
    description: str


class Scoring(ABC):
    """One workload's models scored on a holdout, beside its baselines, and reported."""

    figure: str  # what the comparison table ranks by, as its artifact names it ("Bits per byte", "Accuracy", ...)
    holding: str  # what its data holds, as a refusal names it ("text", "image")
    records: tuple[str, ...]  # the data manifest kinds it scores (`DatasetManifest.kind`)
    others: str  # the models that cannot read it, as a refusal names them
    elsewhere: str  # where those are evaluated instead

    # --- the data and the models ---

    @abstractmethod
    def prepared(self, source: Source) -> EvaluationData | None:
        """The source prepared into `source.staging` (never versioned) when it holds this workload's data; None
        when it does not."""

    @abstractmethod
    def reads(self, ref: ModelRef) -> bool:
        """Whether the (downloaded) model reads this workload's data."""

    def source_settings(self, source: str) -> dict[str, Any]:
        """The `data` settings a source that only this workload's data comes from is read with ({} for others)."""
        return {}

    def refuse(self, refs: list[ModelRef], data_label: str) -> None:
        """Every model must read the data: the others are refused by name before any model is scored."""
        other = [ref for ref in refs if not self.reads(ref)]
        if other:
            listed = ", ".join(ref.model for ref in other)
            raise ValueError(
                f"{listed}: {self.others}, and {data_label} holds {self.holding} data: `foundry evaluate` scores "
                f"models on data of their own modality; evaluate them separately, on {self.elsewhere}"
            )

    def check_models(self, refs: list[ModelRef], data: EvaluationData) -> None:
        """Every model can be scored on the prepared data, or none is."""
        self.refuse(refs, data.label)

    # --- the scores ---

    @abstractmethod
    def baselines(self, data: EvaluationData, config: FoundryConfig) -> Baselines:
        """The baselines on the holdout: they depend on the data alone and are computed once."""

    @abstractmethod
    def score(self, ref: ModelRef, data: EvaluationData, config: FoundryConfig, base: Baselines) -> ModelScores:
        """One model's figures on the holdout."""

    @abstractmethod
    def holdout(self, data: EvaluationData) -> tuple[int, int | None]:
        """The holdout's size: its bytes (0 where they do not count), and its records (None where they do not)."""

    # --- the runs: `eval/...` metrics on each model's run ---

    @abstractmethod
    def metrics(self, scores: ModelScores) -> dict[str, float]:
        """A model's figures as `eval/...` metrics, linked to its logged model."""

    def baseline_metrics(self, baselines: Baselines) -> dict[str, float]:
        """The baselines as `eval/baseline/<name>_<unit>`, on every run (none where there are none)."""
        return {f"{BASELINE}{name}_{baselines.unit}": v for name, v in baselines.scores.items()}

    def run_tags(self, scores: ModelScores) -> dict[str, str]:
        """Tags a model's run carries beyond the model and the data (a model that could not be compared)."""
        return {}

    # --- the report ---

    @abstractmethod
    def rows(self, evaluation: Evaluation) -> list[dict[str, str]]:
        """The overall comparison: the table artifact's rows and the markdown's."""

    @abstractmethod
    def comparison(self, evaluation: Evaluation) -> str:
        """The text `foundry evaluate` prints and the flow's summary."""

    @abstractmethod
    def outcome(self, evaluation: Evaluation) -> str:
        """The flow's one-line outcome: the best model."""

    @abstractmethod
    def headline(self, scores: ModelScores) -> str:
        """One model's figure for a log line."""

    def chart(self, evaluation: Evaluation, path: Path) -> Path | None:
        """The comparison as one PNG at `path`; None where there is none."""
        return None

    def tables(self, evaluation: Evaluation) -> list[Table]:
        """Table artifacts beside the overall comparison."""
        return []


def scoring_of(data: EvaluationData) -> Scoring:
    """How the data's workload scores and reports its models."""
    return named(data.kind).scoring()
