"""A training resumed at another world size (#56 point 3): a run at 2 ranks that lost one goes on at 1, and back.

The global batch (rows per optimizer step, `batch_size x ranks x grad_accum_steps`) is the training's, fixed by the
attempt that started it and carried in every checkpoint (`Schedule`); a resume at another world size keeps it by
deriving the accumulation (`at_world`), and its loader takes the same windows each step (`models.data`). The
run is tagged with every world size it ran at. Bitwise equality with an uninterrupted run holds only while the
world size stays the same: other ranks sum the gradients in another order, each rank with other threads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from foundry.config import FoundryConfig

log = logging.getLogger(__name__)

# Lightning's counters of micro-batches in the fit loop's state; the others count optimizer steps or epochs.
MICRO_BATCH_PROGRESS = "epoch_loop.batch_progress"


class WorldChangeRefused(ValueError):
    """A checkpoint cannot be continued at this world size (the global batch does not divide, or FSDP)."""


@dataclass(frozen=True)
class Schedule:
    """`global_batch`: rows per optimizer step across every rank; `world_sizes`: each world size the training ran
    at, in order, the current one last (`2,1`: started at 2 ranks, resumed at 1)."""

    global_batch: int
    world_sizes: tuple[int, ...]

    @property
    def world_size(self) -> int:
        return self.world_sizes[-1]

    def state(self) -> dict:
        return {"global_batch": self.global_batch, "world_sizes": list(self.world_sizes)}

    def tag(self) -> str:
        return ",".join(map(str, self.world_sizes))


def world_of(config: FoundryConfig) -> int:
    return config.train.devices * config.train.num_nodes


def saved_schedule(checkpoint: Path, config: FoundryConfig) -> Schedule | None:
    """The schedule `checkpoint` was written under; for one written before schedules were saved, its world size
    (in its arithmetic) with the config's accumulation, which the resume key then held; None for older ones."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=True)
    ours = state.get("callbacks", {}).get("CheckpointEvery", {})
    if "schedule" in ours:
        saved = ours["schedule"]
        return Schedule(int(saved["global_batch"]), tuple(int(w) for w in saved["world_sizes"]))
    world = (ours.get("arithmetic") or {}).get("world_size")
    if world is None:
        return None
    t = config.train
    return Schedule(t.batch_size * int(world) * t.grad_accum_steps, (int(world),))


def at_world(config: FoundryConfig, saved: Schedule | None) -> tuple[FoundryConfig, Schedule]:
    """`config` at its world size continuing `saved` (None: a fresh start): the accumulation that keeps the saved
    global batch with the same rows per micro-batch, and the schedule this run saves. Refused when the global
    batch does not divide into this world's micro-batches, or when FSDP would have to reshard."""
    t, world = config.train, world_of(config)
    if saved is None:
        return config, Schedule(t.batch_size * world * t.grad_accum_steps, (world,))
    worlds = saved.world_sizes if saved.world_size == world else (*saved.world_sizes, world)
    if saved.world_size != world and t.strategy == "fsdp":
        raise WorldChangeRefused(
            f"the checkpoint was written by {saved.world_size} FSDP ranks and this run has {world}: resuming FSDP "
            "at another world size is not supported (its optimizer state would have to be resharded, which no test "
            f"shows). Resume at {saved.world_size} ranks, or with strategy ddp"
        )
    per_micro_batch = t.batch_size * world
    if saved.global_batch % per_micro_batch:
        raise WorldChangeRefused(
            f"the checkpoint's global batch of {saved.global_batch} rows (train.batch_size x ranks x "
            f"grad_accum_steps at {saved.world_size} ranks) does not divide across {world} ranks of "
            f"{t.batch_size} rows: resume at a world size whose ranks x {t.batch_size} divides {saved.global_batch}"
        )
    accum = saved.global_batch // per_micro_batch
    if accum != t.grad_accum_steps:
        log.warning(
            "resuming at %d ranks a training of %s: train.grad_accum_steps %d -> %d keeps its global batch of %d rows",
            world,
            Schedule(saved.global_batch, saved.world_sizes).tag(),
            t.grad_accum_steps,
            accum,
            saved.global_batch,
        )
    return config.accumulating(accum), Schedule(saved.global_batch, worlds)


def rescale_loops(checkpoint: dict, saved_world: int, world: int) -> None:
    """Lightning's micro-batch counters in `checkpoint` (in place), from a world of `saved_world` ranks to one of
    `world`: the same optimizer steps are `saved_world / world` times as many micro-batches per rank. A counter
    one short of the micro-batches drawn (the batch whose end saved the checkpoint) stays one short."""
    progress = checkpoint["loops"]["fit_loop"][MICRO_BATCH_PROGRESS]
    ratio = Fraction(saved_world, world)
    for scope in ("total", "current"):
        counts = progress[scope]
        ready = counts["ready"]
        scaled = {name: count - ready + ready * ratio for name, count in counts.items()}
        if any(v.denominator != 1 for v in scaled.values()):
            raise WorldChangeRefused(
                f"the checkpoint stands {ready} micro-batches into its {scope} progress at {saved_world} ranks, "
                f"no whole number of micro-batches at {world}: it was not written at an optimizer step"
            )
        progress[scope] = {name: int(v) for name, v in scaled.items()}
