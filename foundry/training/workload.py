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

    # --- evaluation and gates ---------------------------------------------------------------------

    @abstractmethod
    def scoring(self) -> Any:
        """How `foundry evaluate` scores its registered models on a holdout, the baselines it sets beside them
        and how it reports them: a `foundry.evaluate.scoring.Scoring`."""

    def validate(self, config: Any, checkpoint: Path, data_dir: Path, run: Any) -> Any:
        """Stage E: a trained model's holdout metrics beside the baselines, logged on its run with what shows them
        (generations, plots); returns the metrics."""
        raise NotImplementedError(f"the {self.name} workload's models are not validated by stage E")

    def gate_compares(self) -> Any:
        """What its pretraining and specialist gates compare: a `foundry.gates.inputs.Compared`."""
        raise NotImplementedError(f"the {self.name} workload's models go through no pretraining or specialist gate")

    def gate_score(self, weights: Path, tokenizer: Path, data_dir: Path, config: Any) -> float:
        """A model's score on the holdout of `data_dir` by the gate's measure (`weights`: its model.pt;
        `tokenizer`: its tokenizer.json, where it has one)."""
        raise NotImplementedError(f"the {self.name} workload's models go through no pretraining or specialist gate")

    def recorded_score(self, version: Any, config: Any) -> float | None:
        """A registered version's recorded holdout score by the gate's measure, when it was scored as `config`
        scores; None: re-score it."""
        raise NotImplementedError(f"the {self.name} workload's models go through no pretraining or specialist gate")


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
