"""The chat workload: conversations or preference pairs (`foundry.align.prepare`), a GPT aligned on them."""

from __future__ import annotations

from pathlib import Path

from foundry.data.manifest import DatasetManifest
from foundry.training.workload import Workload

KINDS = ("chat", "preference")


class ChatWorkload(Workload):
    name = "chat"

    def holds(self, data_dir: Path) -> bool:
        return (Path(data_dir) / "manifest.json").is_file() and DatasetManifest.read(data_dir).kind in KINDS

    def data(self, data_dir: Path) -> DatasetManifest:
        return DatasetManifest.read(data_dir)


WORKLOAD = ChatWorkload()
