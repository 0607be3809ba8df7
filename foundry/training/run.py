"""What one training run reads and writes beside its config, as one typed value: the trainer takes it whole
rather than six loose arguments, and a rank's worker and the one-process launch build it from what they got."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from foundry.core.contracts import Replay


@dataclass(frozen=True)
class TrainingRun:
    """`data_dir`: the prepared dataset it trains on; `checkpoint_dir`: where its checkpoints and `model.pt` go;
    `run_id`: the MLflow run it logs to (None: none); `data_version`: saved in `model.pt`; `resume_from`: a
    verified checkpoint it continues from; `replay`: the pretraining data an SFT or DPO run replays windows of
    (its config's replay fraction)."""

    data_dir: Path
    checkpoint_dir: Path
    run_id: str | None = None
    data_version: str = ""
    resume_from: Path | None = None
    replay: Replay | None = None
