"""The image workload: labelled images in WebDataset shards (`foundry.vision.stage`), a classifier trained on them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from foundry.config import FoundryConfig
from foundry.contracts import RunContext
from foundry.gates.inputs import BY_ACCURACY, Compared
from foundry.training.workload import Workload
from foundry.vision.metrics import VisionMetrics
from foundry.vision.shards import FILE, ShardManifest

if TYPE_CHECKING:
    from foundry.evaluate.scoring import Scoring


class ImageWorkload(Workload):
    name = "image"

    def holds(self, data_dir: Path) -> bool:
        return (Path(data_dir) / FILE).is_file()

    def data(self, data_dir: Path) -> ShardManifest:
        return ShardManifest.read(data_dir)

    # --- evaluation and gates ---

    def scoring(self) -> Scoring:
        from foundry.vision.scoring import SCORING

        return SCORING

    def validate(self, config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext) -> VisionMetrics:
        from foundry.vision.validation import validate

        return validate(config, checkpoint, data_dir, run)

    def gate_compares(self) -> Compared:
        return BY_ACCURACY

    def gate_score(self, weights: Path, tokenizer: Path, data_dir: Path, config: FoundryConfig) -> float:
        """Holdout accuracy (a classifier has no tokenizer)."""
        from foundry.vision.evaluate import accuracy_on

        return accuracy_on(weights, data_dir, config.evaluation.batch_size)

    def recorded_score(self, version, config: FoundryConfig) -> float | None:
        """Its recorded accuracy: the whole holdout is always scored, so any record is scored alike."""
        from foundry.registry.lineage import recorded_metrics

        return recorded_metrics(version).get(VisionMetrics.key("accuracy"))


WORKLOAD = ImageWorkload()
