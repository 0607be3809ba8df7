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

    # --- training ---

    def module(self, config, data: ShardManifest, settings: dict, on_gpu: bool):
        from foundry.vision.training import build_vision_module

        return build_vision_module(config, data, settings, on_gpu)

    def loaders(self, config, data_dir: Path, data: ShardManifest, rank: int, world_size: int, replay):
        from foundry.vision.training import vision_loaders

        return vision_loaders(config, data_dir, rank, world_size)

    def warm_start(self, parent: dict, module, data: ShardManifest, config) -> dict:
        """The parent classifier's weights, its head grown by a fresh row per class it lacks (`foundry.vision.finetune`)."""
        from foundry.vision.finetune import warm_start_state

        return warm_start_state(parent, data.classes, config.train.seed)

    def after_fit(self, module) -> None:
        """BatchNorm's statistics, which neither DDP nor FSDP reduces: rank 0's on every rank."""
        from foundry.training.sharding import rank0_buffers

        rank0_buffers(module)

    def saved_extra(self, config, data: ShardManifest) -> dict:
        """The labels and the preprocessing a request needs (`foundry.vision.training.saved_extra`)."""
        from foundry.vision.training import saved_extra

        return saved_extra(config, data)

    def fsdp_units(self, module) -> set[type]:
        """A ViT's blocks; a CNN has none and is one unit."""
        from models.vision import Block

        return {type(m) for m in module.modules() if isinstance(m, Block)}

    def retrain_config(self, raw: dict, given: dict, recorded: dict) -> dict:
        """The modality and the `image` and `vision` settings that fix the weights' and inputs' shape: the parent's."""
        from foundry.vision.finetune import image_sections

        return image_sections(raw, given, recorded)


WORKLOAD = ImageWorkload()
