"""The image workload: labelled images in WebDataset shards (`foundry.vision.stage`), a classifier trained on them."""

from __future__ import annotations

from pathlib import Path

from foundry.training.workload import Workload
from foundry.vision.shards import FILE, ShardManifest


class ImageWorkload(Workload):
    name = "image"

    def holds(self, data_dir: Path) -> bool:
        return (Path(data_dir) / FILE).is_file()

    def data(self, data_dir: Path) -> ShardManifest:
        return ShardManifest.read(data_dir)


WORKLOAD = ImageWorkload()
