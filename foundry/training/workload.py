"""What a kind of model brings to Foundry, and the registry that finds it.

The trainer, the gates' gathering, `foundry evaluate`, purge and serving ask a `Workload`; none of them branches
on modality. Each workload lives in its own folder and is registered here by module path, imported only when it
is asked for (an image workload brings Pillow, a chat one the alignment losses):

- `text` (`foundry.pretrain.workload`): documents as token shards, a GPT pretrained on them
- `chat` (`foundry.align.workload`): conversations or preference pairs, a GPT aligned on them
- `image` (`foundry.vision.workload`): labelled images in WebDataset shards, a classifier trained on them

A fourth workload (audio, video frames, tabular) is one new folder with a `WORKLOAD` value and one line in
`REGISTERED`. After torchtitan's `TrainSpec`: checkpointing and resilience are the trainer's, not the workload's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import Any

# name -> the module whose `WORKLOAD` is that workload; the order is the order `for_data` asks them in
REGISTERED: dict[str, str] = {
    "image": "foundry.vision.workload",
    "chat": "foundry.align.workload",
    "text": "foundry.pretrain.workload",
}


class Workload(ABC):
    """One kind of model: what the trainer, the gates, evaluate, purge and serving ask of it."""

    name: str  # "text", "chat", "image": the key in REGISTERED

    # --- what it reads ----------------------------------------------------------------------------

    @abstractmethod
    def holds(self, data_dir: Path) -> bool:
        """Whether a prepared data folder is this workload's data."""

    @abstractmethod
    def data(self, data_dir: Path) -> Any:
        """The data folder's typed description (its manifest), as the other methods take it."""

    # --- training ---------------------------------------------------------------------------------

    @abstractmethod
    def module(self, config: Any, data: Any, settings: dict, on_gpu: bool) -> Any:
        """The LightningModule that trains on `data` (a `models.lit_base.LitBase`), with the trainer's `settings`
        (`models.lit_base.SETTINGS`); `on_gpu`: whether it will run on a GPU (a memory layout may depend on it)."""

    @abstractmethod
    def loaders(self, config: Any, data_dir: Path, data: Any, rank: int, world_size: int, replay: Any) -> tuple:
        """(train, validation) loaders of rank `rank` of `world_size`; `replay` (a `foundry.core.contracts.Replay` or
        None): pretraining data a run mixes in, for the workloads that replay it."""

    @abstractmethod
    def warm_start(self, parent: dict, module: Any, data: Any, config: Any) -> dict:
        """The state dict `module.model` starts from, made of a parent's `model.pt` (as loaded); a parent the
        module cannot start from is refused, naming what differs."""

    @abstractmethod
    def after_fit(self, module: Any) -> None:
        """What every rank does to the module after fitting, before its weights are gathered and digested."""

    @abstractmethod
    def saved_extra(self, config: Any, data: Any) -> dict:
        """What `model.pt` holds besides the weights, for the model's use (a chat template, labels)."""

    @abstractmethod
    def fsdp_units(self, module: Any) -> set[type]:
        """The block classes in `module` FSDP wraps one by one; empty for a model without blocks."""

    @abstractmethod
    def retrain_config(self, raw: dict, given: dict, recorded: dict) -> dict:
        """A retrain's raw config (`raw`) with what the parent's recorded config fixes of this workload's model and
        inputs; `given`: this run's config as written."""


@cache
def named(name: str) -> Workload:
    """The registered workload `name`; a clear error naming the registered ones for any other."""
    if name not in REGISTERED:
        raise ValueError(f"no workload {name!r}: the registered ones are {', '.join(REGISTERED)}")
    return import_module(REGISTERED[name]).WORKLOAD


def for_data(data_dir: Path) -> Workload:
    """The workload whose data a prepared data folder holds."""
    for name in REGISTERED:
        if named(name).holds(Path(data_dir)):
            return named(name)
    raise ValueError(f"{data_dir} holds no prepared data of any workload ({', '.join(REGISTERED)})")
