"""The chat workload: conversations or preference pairs (`foundry.align.prepare`), a GPT aligned on them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from foundry.data.manifest import DatasetManifest
from foundry.training.workload import Workload

if TYPE_CHECKING:
    from foundry.evaluate.scoring import Scoring

KINDS = ("chat", "preference")


class ChatWorkload(Workload):
    name = "chat"

    def holds(self, data_dir: Path) -> bool:
        return (Path(data_dir) / "manifest.json").is_file() and DatasetManifest.read(data_dir).kind in KINDS

    def data(self, data_dir: Path) -> DatasetManifest:
        return DatasetManifest.read(data_dir)

    # --- evaluation and gates: its gate is the alignment gate (`foundry.align.gate`) ---

    def scoring(self) -> Scoring:
        from foundry.align.scoring import SCORING

        return SCORING


WORKLOAD = ChatWorkload()
