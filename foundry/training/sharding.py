"""FSDP for the trainer: its units, a strategy that also runs on CPU ranks, and BatchNorm's statistics.

`train.strategy: fsdp` shards parameters, gradients and optimizer state. Units: one per transformer block (the
GPT's, a ViT's: the workload names them, `Workload.fsdp_units`), so only a block or two is ever gathered whole
(what `foundry/training/plan.py` assumes); a CNN has no blocks and is one unit. On a GPU, Lightning's
`FSDPStrategy` as it is. On CPU ranks (gloo) the same strategy with the one thing Lightning gets wrong there: it
hands FSDP `device_id=None`, which FSDP reads as "find an accelerator" and refuses; Lightning also refuses an
`FSDPStrategy` with accelerator cpu, but only the class itself, not a subclass. CPU ranks make the sharded path testable without a GPU; they are no faster than DDP.
"""

from __future__ import annotations

from datetime import timedelta

import torch
from lightning.pytorch import Callback
from lightning.pytorch.strategies import FSDPStrategy


class CpuFSDPStrategy(FSDPStrategy):
    """`FSDPStrategy` on CPU ranks: FSDP is told the device (the CPU) rather than left to look for a GPU, and full
    state dicts are gathered without Lightning's `offload_to_cpu`: on a CPU the "offloaded" copy is the unsharded
    buffer itself, which FSDP frees on leaving the gather, and the first checkpoint segfaulted reading it."""

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(
            module=model,
            cpu_offload=self.cpu_offload,
            mixed_precision=self.mixed_precision_config,
            sharding_strategy=self.sharding_strategy,
            device_id=self.root_device,
            **self.kwargs,
        )

    def lightning_module_state_dict(self) -> dict:
        with _full_state_dict(self.model):
            return self.model.state_dict()

    def optimizer_state(self, optimizer) -> dict:
        from torch.distributed.fsdp import FullyShardedDataParallel, OptimStateKeyType

        optimizer = getattr(optimizer, "_optimizer", optimizer)  # a LightningOptimizer's own
        with _full_state_dict(self.model):
            state = FullyShardedDataParallel.optim_state_dict(self.model, optimizer)
            if self.global_rank == 0:  # keyed by parameter index, as Lightning's FSDPStrategy stores it
                state = FullyShardedDataParallel.rekey_optim_state_dict(state, OptimStateKeyType.PARAM_ID, self.model)
            return state


def _full_state_dict(model: torch.nn.Module):
    """Lightning's full-state-dict context (gathered on rank 0 only) without offloading to the CPU."""
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return FSDP.state_dict_type(
        model,
        StateDictType.FULL_STATE_DICT,
        FullStateDictConfig(offload_to_cpu=False, rank0_only=True),
        FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=True),
    )


def fsdp_strategy(timeout: timedelta, units: set[type[torch.nn.Module]], on_gpu: bool) -> FSDPStrategy:
    """Full state dicts gathered on rank 0, so checkpoints and `model.pt` look the same as with DDP."""
    kind = FSDPStrategy if on_gpu else CpuFSDPStrategy
    return kind(timeout=timeout, state_dict_type="full", auto_wrap_policy=units or None)


def has_batch_norm(module: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules())


def rank0_buffers(module: torch.nn.Module) -> None:
    """Every rank's buffers (BatchNorm's running statistics) made rank 0's. DDP hands rank 0's buffers to every
    rank before each forward, so each rank's last step leaves statistics of its own batch, and the replicas'
    weight digests would differ; rank 0's are the ones `model.pt` keeps and the next forward would have used."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        for buffer in module.buffers():
            dist.broadcast(buffer.data, src=0)


class Rank0Buffers(Callback):
    """Rank 0's buffers (BatchNorm's running statistics) on every rank before each forward, as DDP hands them.

    FSDP shards parameters, not buffers, and never syncs them: each rank's statistics would follow its own batches,
    so ranks would validate differently, and a resumed run, whose ranks all load rank 0's statistics, would
    validate differently from an uninterrupted one."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        rank0_buffers(pl_module)

    def on_validation_start(self, trainer, pl_module) -> None:
        rank0_buffers(pl_module)
