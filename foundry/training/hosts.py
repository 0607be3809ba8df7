"""Where a run's ranks ran: the MLflow tag `train.hosts`, each rank's host in rank order, gathered to rank 0.

A rank's host is the SLURM node it runs on where SLURM started it (`SLURMD_NODENAME`: several nodes may share
one machine, as on `infra/slurm/local-cluster.sh`), else the machine's name."""

from __future__ import annotations

import os
import socket

from lightning.pytorch.callbacks import Callback

from foundry.core.run_tags import HOSTS


def this_host() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def rank_hosts() -> list[str]:
    """Every rank's host, in rank order; a collective when the ranks' process group is up (every rank calls it)."""
    import torch.distributed as dist

    host = this_host()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [host]
    hosts: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, host)
    return [str(h) for h in hosts]


class RecordHosts(Callback):
    """At setup, once the process group is up: every rank sends its host; rank 0 tags `run_id` (when given) with
    them, before the first step, so that a run that fails later still says where it ran."""

    def __init__(self, run_id: str | None):
        self.run_id = run_id

    def setup(self, trainer, pl_module, stage: str) -> None:
        hosts = rank_hosts()
        if self.run_id is not None and trainer.global_rank == 0:
            from mlflow import MlflowClient

            MlflowClient().set_tag(self.run_id, HOSTS, ",".join(hosts))
