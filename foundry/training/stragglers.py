"""A rank slower than the others, reported: each rank's forward time in the run's metrics, and a warning
naming the rank and its host when one takes more than `STRAGGLER_RATIO` times the others' median.

Data-parallel ranks wait for one another at every gradient all-reduce, so a step's wall time is the slowest
rank's on every rank and says nothing about who is slow; DDP's own forward starts with a buffer broadcast,
where a fast rank waits for the slow one. So each rank times the forward of the model inside the DDP wrapper
(hooks on `pl_module.model`): no collective there, its own pace. Every `train.log_every_n_steps` optimizer steps
the ranks gather their mean; rank 0 logs `pace/rank_<r>_forward_ms` for each and warns about a straggler. One
rank: nothing to compare, nothing done. Under FSDP the forward gathers parameters, so a slow rank's pace shows
on all of them and no straggler can be singled out.
"""

from __future__ import annotations

import logging
import statistics
import time

import torch
from lightning.pytorch import Callback

from foundry.training.hosts import rank_hosts

log = logging.getLogger(__name__)

STRAGGLER_RATIO = 1.5  # a rank this many times the others' median forward time is named


class RankPace(Callback):
    def __init__(self, every_n_steps: int):
        self.every_n_steps = max(1, every_n_steps)
        self.hosts: list[str] = []
        self._forward_s, self._batches, self._started, self._reported_at = 0.0, 0, 0.0, -1
        self._hooks: list = []

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.world_size > 1:
            self.hosts = rank_hosts()
            model = pl_module.model
            self._hooks = [model.register_forward_pre_hook(self._start), model.register_forward_hook(self._stop)]

    def on_train_end(self, trainer, pl_module) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _start(self, module, args) -> None:
        if module.training:  # not validation's forward passes
            self._started = time.perf_counter()

    def _stop(self, module, args, output) -> None:
        if module.training and self._started:
            self._forward_s += time.perf_counter() - self._started
            self._batches += 1
        self._started = 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if trainer.world_size == 1 or step % self.every_n_steps or step == self._reported_at:
            return
        self._reported_at = step
        mine = torch.tensor([self._forward_s / max(self._batches, 1) * 1000.0], dtype=torch.float64)
        self._forward_s, self._batches = 0.0, 0
        paces = [float(v) for v in trainer.strategy.all_gather(mine).reshape(-1)]
        if trainer.global_rank == 0:
            report(paces, self.hosts, step, trainer.loggers)


def stragglers(paces: list[float], ratio: float = STRAGGLER_RATIO) -> list[int]:
    """The ranks whose forward time is more than `ratio` times the median of the others'."""
    slow = []
    for rank, pace in enumerate(paces):
        others = paces[:rank] + paces[rank + 1 :]
        if others and pace > ratio * statistics.median(others):
            slow.append(rank)
    return slow


def report(paces: list[float], hosts: list[str], step: int, loggers) -> None:
    metrics = {f"pace/rank_{rank}_forward_ms": pace for rank, pace in enumerate(paces)}
    for logger in loggers:
        logger.log_metrics(metrics, step=step)
    for rank in stragglers(paces):
        others = statistics.median(paces[:rank] + paces[rank + 1 :])
        host = hosts[rank] if rank < len(hosts) else "?"
        log.warning(
            "rank %d on %s is a straggler: its forward pass takes %.1f ms, %.1fx the others' median of %.1f ms "
            "(step %d); the whole run waits for it at every step",
            rank,
            host,
            paces[rank],
            paces[rank] / others,
            others,
            step,
        )
