"""The text workload: documents prepared as token shards (`foundry.data`), a GPT pretrained on them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from foundry.config import FoundryConfig
from foundry.contracts import RunContext
from foundry.data.manifest import DatasetManifest
from foundry.evaluation.holdout_metrics import HoldoutMetrics
from foundry.gates.inputs import BY_BITS_PER_BYTE, Compared
from foundry.training.workload import Workload

if TYPE_CHECKING:
    from foundry.evaluate.scoring import Scoring


class TextWorkload(Workload):
    name = "text"

    def holds(self, data_dir: Path) -> bool:
        return (Path(data_dir) / "manifest.json").is_file() and DatasetManifest.read(data_dir).is_documents

    def data(self, data_dir: Path) -> DatasetManifest:
        return DatasetManifest.read(data_dir)

    # --- evaluation and gates ---

    def scoring(self) -> Scoring:
        from foundry.pretrain.scoring import SCORING

        return SCORING

    def validate(self, config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext) -> HoldoutMetrics:
        from foundry.pretrain.validation import validate

        return validate(config, checkpoint, data_dir, run)

    def gate_compares(self) -> Compared:
        return BY_BITS_PER_BYTE

    def gate_score(self, weights: Path, tokenizer: Path, data_dir: Path, config: FoundryConfig) -> float:
        """Bits per byte on the holdout, tokenized with the model's own tokenizer."""
        from foundry.registry.gate import score

        return score(weights, tokenizer, data_dir, config)

    def recorded_score(self, version, config: FoundryConfig) -> float | None:
        """Its recorded bits per byte, when scored as this run scores: the same `evaluation.max_tokens` from the
        holdout's start (a record that names none is taken as it was before) and `evaluation.window_overlap`
        (`as_recorded` gives older records the 0 they were scored with)."""
        from foundry.registry.lineage import recorded_config, recorded_metrics

        recorded, e = recorded_config(version).get("evaluation", {}), config.evaluation
        max_tokens, overlap = recorded.get("max_tokens"), recorded.get("window_overlap", 0.0)
        if (max_tokens is None or int(max_tokens) == e.max_tokens) and float(overlap) == e.window_overlap:
            return recorded_metrics(version).get(HoldoutMetrics.key("bits_per_byte"))  # its run's, or older tags
        return None


WORKLOAD = TextWorkload()
