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

    # --- training ---

    def module(self, config, data: DatasetManifest, settings: dict, on_gpu: bool):
        from foundry.pretrain.training import model_args
        from models.lit_gpt import LitGPT

        return LitGPT(model_args(config, data.vocab_size), **settings)

    def loaders(self, config, data_dir: Path, data: DatasetManifest, rank: int, world_size: int, replay):
        from foundry.pretrain.training import text_loaders

        return text_loaders(config, data_dir, rank, world_size)  # pretraining replays nothing: it is the source

    def warm_start(self, parent: dict, module, data: DatasetManifest, config) -> dict:
        from foundry.training.warm_start import text_start

        return text_start(parent, module.model.config)

    def after_fit(self, module) -> None:
        """Nothing: a GPT has no buffers a rank changes (no running statistics), so DDP and FSDP leave ranks equal."""

    def saved_extra(self, config, data: DatasetManifest) -> dict:
        return {}

    def fsdp_units(self, module) -> set[type]:
        from foundry.pretrain.training import gpt_blocks

        return gpt_blocks(module)

    def retrain_config(self, raw: dict, given: dict, recorded: dict) -> dict:
        return raw  # the model's shape and tokenizer are the parent's already (`warm_started`)


WORKLOAD = TextWorkload()
