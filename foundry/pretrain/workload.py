"""The text workload: documents prepared as token shards (`foundry.data`), a GPT pretrained on them."""

from __future__ import annotations

from pathlib import Path

from foundry.data.manifest import DatasetManifest
from foundry.training.workload import Workload


class TextWorkload(Workload):
    name = "text"

    def holds(self, data_dir: Path) -> bool:
        return (Path(data_dir) / "manifest.json").is_file() and DatasetManifest.read(data_dir).is_documents

    def data(self, data_dir: Path) -> DatasetManifest:
        return DatasetManifest.read(data_dir)


WORKLOAD = TextWorkload()
