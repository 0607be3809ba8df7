"""Writing checkpoints from Lightning: when (every N steps and at the end), where (atomically, listed in
the manifest, the last few and the best kept), and with the RNG states, so a resumed run is exact.

Rank 0 writes; every rank reads the same folder.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch import Callback
from lightning.pytorch.plugins.io import TorchCheckpointIO

from foundry.checkpointing.manifest import LAST, Entry, read_manifest, retained, write_atomic, write_manifest
from foundry.checkpointing.world import Schedule, rescale_loops
from foundry.runtime import preemption
from foundry.runtime.arithmetic import WORLD_DERIVED

log = logging.getLogger(__name__)


def rng_states() -> dict:
    """Every generator's state, in types that `torch.load(weights_only=True)` accepts."""
    _, keys, pos, has_gauss, cached = np.random.get_state()
    states = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state(("MT19937", np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _to_host(obj, staging: dict, path: tuple = (), copies: dict | None = None):
    """A point-in-time copy on the CPU: training goes on mutating the originals in place.

    Copies land in `staging` buffers kept from the previous save (keyed by their place in the
    checkpoint), so a save costs a memcpy, not fresh page faults. Tensors that view the same memory
    (tied embeddings) are copied once, so they stay shared, as `torch.save` keeps the originals.
    """
    copies = {} if copies is None else copies
    if isinstance(obj, torch.Tensor):
        key = (
            obj.untyped_storage().data_ptr(),
            obj.storage_offset(),
            tuple(obj.shape),
            obj.stride(),
            obj.dtype,
            obj.device,
        )
        if key not in copies:
            buffer = staging.get(path)
            if buffer is None or buffer.shape != obj.shape or buffer.dtype != obj.dtype:
                buffer = staging[path] = torch.empty(obj.shape, dtype=obj.dtype, pin_memory=obj.is_cuda)
            copies[key] = buffer.copy_(obj.detach(), non_blocking=obj.is_cuda)
        return copies[key]
    if isinstance(obj, dict):
        return type(obj)((k, _to_host(v, staging, (*path, k), copies)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_to_host(v, staging, (*path, i), copies) for i, v in enumerate(obj))
    return obj


class ManifestCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer: atomic files, the manifest, retention; optionally off-thread.

    With `async_save`, training stalls only for the copy to host memory (and, if the previous
    write is still running, until it ends); one background thread writes, so saves and manifest
    updates stay in order. It costs a second copy of the checkpoint in host memory.
    """

    def __init__(self, directory: Path, keep_last: int, async_save: bool = False):
        super().__init__()
        self.directory, self.keep_last = Path(directory), keep_last
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="checkpoint") if async_save else None
        self._pending: list[Future] = []
        self._staging: dict = {}  # host copies for asynchronous saves, reused from save to save
        for leftover in self.directory.glob(".*.tmp"):  # from a save that a crash interrupted
            leftover.unlink(missing_ok=True)

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        step = int(checkpoint["global_step"])
        if self._executor is None:
            return self._save(checkpoint, Path(path), step)
        self.wait()  # the staging buffers are reused: the previous write must be done with them
        staged = _to_host(checkpoint, self._staging)
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the copies to pinned memory were asynchronous
        self._pending.append(self._executor.submit(self._save, staged, Path(path), step))

    def start_at(self, step: int) -> None:
        """This training continues the folder's history from `step` (0: afresh). Checkpoints of later steps
        belong to a training it replaces (a fresh start over another run's folder, or a resume that fell back past
        a broken checkpoint): they leave the manifest and the folder now, before they could outrank its own."""
        self.wait()
        entries = read_manifest(self.directory)
        later = [e for e in entries if e.step > step]
        if not later:
            return
        log.warning(
            "%s holds checkpoints past step %d that this training replaces: removing %s",
            self.directory,
            step,
            ", ".join(e.file for e in later),
        )
        kept = [e for e in entries if e.step <= step]
        write_manifest(self.directory, kept)
        for entry in later:
            (self.directory / entry.file).unlink(missing_ok=True)
        (self.directory / LAST).unlink(missing_ok=True)
        newest = max(kept, key=lambda e: e.step, default=None)
        if newest is not None and (self.directory / newest.file).is_file():
            _link_last(self.directory / newest.file)

    def annotate(self, step: int, val_loss: float) -> None:
        """Record the validation loss measured at `step` on that step's checkpoint (for "best")."""
        if self._executor is None:
            return self._annotate(step, val_loss)
        self._pending.append(self._executor.submit(self._annotate, step, val_loss))

    def wait(self) -> None:
        """Until every queued write is done; a failed one raises here, on the training thread."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def teardown(self) -> None:
        self.wait()

    def _save(self, checkpoint: dict, path: Path, step: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        sha, size = write_atomic(path, lambda f: torch.save(checkpoint, f))
        entries = [e for e in read_manifest(self.directory) if e.step != step]
        entries.append(Entry(path.name, step, sha, size))
        self._commit(entries)
        _link_last(path)

    def _annotate(self, step: int, val_loss: float) -> None:
        entries = read_manifest(self.directory)
        entries = [Entry(**{**asdict(e), "val_loss": val_loss}) if e.step == step else e for e in entries]
        self._commit(entries)

    def _commit(self, entries: list[Entry]) -> None:
        keep = retained(entries, self.keep_last)
        write_manifest(self.directory, keep)
        kept = {k.file for k in keep}
        for entry in entries:
            if entry.file not in kept:
                (self.directory / entry.file).unlink(missing_ok=True)


def _link_last(path: Path) -> None:
    tmp = path.with_name(f".{LAST}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:  # file systems without hard links: a copy
        shutil.copyfile(path, tmp)
    os.replace(tmp, path.with_name(LAST))


def _refusing(saved: dict | None, ours: dict | None) -> dict:
    """What of the arithmetic a checkpoint was written under (`saved`) differs from this run's (`ours`) and forbids
    resuming it, as {key: (checkpoint's, ours)}: anything, unless the world size differs and nothing else but what
    follows from it; that resume goes on, not bitwise (`foundry.checkpointing.world`)."""
    if saved is None or ours is None:  # a checkpoint written before the arithmetic was
        return {}
    differs = {k: (saved.get(k), v) for k, v in ours.items() if saved.get(k) != v}
    if "world_size" in differs and set(differs) <= set(WORLD_DERIVED):
        log.warning("resuming at another world size, not bitwise as one world size would be: %s", differs)
        return {}
    return differs


class ArithmeticMismatch(RuntimeError):
    """A checkpoint was written by a run whose arithmetic (threads, precision, device, ...) differs from this one's."""


class CheckpointEvery(Callback):
    """Save every `every_n_steps` optimizer steps and at the end; carry the RNG states and the arithmetic.

    Saving happens after the optimizer step (`on_train_batch_end`), before that step's validation;
    the validation loss is then attached to the checkpoint of the same step. `arithmetic` (what decides
    the floating-point results besides the config: `foundry.training.trainer.arithmetic`) is written into
    every checkpoint, and resuming one written under other arithmetic is refused: its continuation would
    not be bitwise what one run gives. Locally the resume key already keeps such runs apart; this catches
    a relaunch into the same folder on a cluster. The one difference allowed is the world size (and the threads
    that follow from it): a run that lost a node goes on at fewer ranks (`foundry.checkpointing.world`), its
    `schedule` (global batch, world sizes so far) saved in every checkpoint, Lightning's micro-batch counts
    rescaled to the accumulation that keeps the global batch.

    Preemption (`foundry.runtime.preemption`): after each optimizer step, where the regular saves happen, the
    ranks ask together whether any got SIGTERM; if one did, all save this step (unless just saved) and raise
    `Preempted`, so the emergency checkpoint resumes as exactly as any other. While fitting, SIGTERM is the
    preemption's handler, not Lightning's (its SignalConnector's): Lightning's stops at any micro-batch, in the
    middle of an accumulation, broadcasts from inside the handler, where a collective can cut into the step's
    all-reduce, and calls the handler before it (Prefect's, which raises in the middle of a step).
    """

    def __init__(
        self,
        io: ManifestCheckpointIO,
        every_n_steps: int,
        arithmetic: dict | None = None,
        schedule: Schedule | None = None,
    ):
        self.io, self.every_n_steps, self.arithmetic, self.schedule = io, every_n_steps, arithmetic, schedule
        self._saved_step = self._seen_step = -1
        self._rng_to_restore: dict | None = None

    def state_dict(self) -> dict:
        state = {"rng": rng_states(), "arithmetic": self.arithmetic}
        return state if self.schedule is None else {**state, "schedule": self.schedule.state()}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        # Before Lightning restores its loops from the checkpoint: their micro-batch counts, in this world's.
        saved = (checkpoint.get("callbacks", {}).get(self.state_key, {}).get("arithmetic") or {}).get("world_size")
        ours = (self.arithmetic or {}).get("world_size")
        if saved is not None and ours is not None and saved != ours:
            rescale_loops(checkpoint, saved, ours)

    def load_state_dict(self, state: dict) -> None:
        differs = _refusing(state.get("arithmetic"), self.arithmetic)
        if differs:
            raise ArithmeticMismatch(
                "the checkpoint to resume was written under other arithmetic, (checkpoint, this run): "
                f"{differs}; continuing it would not give the bits one uninterrupted run gives. Run with the "
                "checkpoint's settings (e.g. train.cpu_threads, train.precision, train.compile, the same device and torch), "
                "or train afresh in another checkpoint folder"
            )
        self._rng_to_restore = state.get("rng")

    def on_train_start(self, trainer, pl_module) -> None:
        # Restored as late as possible: nothing between here and the first batch draws randomness.
        if self._rng_to_restore is not None:
            set_rng_states(self._rng_to_restore)
            self._rng_to_restore = None
        self._saved_step = self._seen_step = trainer.global_step
        if trainer.is_global_zero:
            self.io.start_at(trainer.global_step)
        if preemption.armed():  # this process's entry point asked for preemption; Lightning installed its own handler
            preemption.arm()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step > self._saved_step and step % self.every_n_steps == 0:
            self.save(trainer)
        if step != self._seen_step:  # the first batch end after an optimizer step: a step boundary
            self._seen_step = step
            # "any rank": one collective a step, where Lightning's own check broadcasts one every batch.
            if trainer.strategy.reduce_boolean_decision(preemption.requested(), all=False):
                self._stop(trainer)

    def _stop(self, trainer) -> None:
        if self._saved_step != trainer.global_step:
            self.save(trainer)
        self.io.wait()
        step = trainer.global_step
        raise preemption.Preempted(self.io.directory / f"step-{step:06d}.ckpt", step, preemption.rerun())

    def on_validation_end(self, trainer, pl_module) -> None:
        loss = trainer.callback_metrics.get("val/loss")
        if (
            trainer.is_global_zero
            and loss is not None
            and not trainer.sanity_checking
            and self._saved_step == trainer.global_step
        ):
            self.io.annotate(trainer.global_step, float(loss))

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_step > self._saved_step:
            self.save(trainer)

    def save(self, trainer) -> None:
        self._saved_step = trainer.global_step
        trainer.save_checkpoint(self.io.directory / f"step-{trainer.global_step:06d}.ckpt", weights_only=False)
        if preemption.requested():
            log.warning("preempted: checkpoint of step %d written", trainer.global_step)
