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

    # --- training ---

    def module(self, config, data: DatasetManifest, settings: dict, on_gpu: bool):
        """`LitSFT` for conversations, `LitDPO` for preference pairs (`foundry.align.training`)."""
        from foundry.align.training import build_aligned_module
        from foundry.pretrain.training import model_args

        return build_aligned_module(config, model_args(config, data.vocab_size), data.kind, settings)

    def loaders(self, config, data_dir: Path, data: DatasetManifest, rank: int, world_size: int, replay):
        from foundry.align.training import aligned_loaders

        return aligned_loaders(config, data_dir, data, rank, world_size, replay)

    def warm_start(self, parent: dict, module, data: DatasetManifest, config) -> dict:
        from foundry.training.warm_start import text_start

        return text_start(parent, module.model.config)

    def after_fit(self, module) -> None:
        """Nothing: a GPT has no buffers a rank changes (no running statistics), so DDP and FSDP leave ranks equal."""

    def saved_extra(self, config, data: DatasetManifest) -> dict:
        """The chat template the records were rendered with: what a request's messages are rendered with."""
        return {"chat_template": data.chat_template} if data.chat_template is not None else {}

    def fsdp_units(self, module) -> set[type]:
        from foundry.pretrain.training import gpt_blocks

        return gpt_blocks(module)

    def retrain_config(self, raw: dict, given: dict, recorded: dict) -> dict:
        return raw  # the model's shape and tokenizer are the parent's already (`warm_started`)


WORKLOAD = ChatWorkload()
