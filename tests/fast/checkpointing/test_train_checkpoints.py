"""foundry.checkpointing: atomic files, the manifest, retention, RNG states, where attempts live."""

from __future__ import annotations

import hashlib
import os
import random

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT

from foundry.checkpointing.manifest import Entry, latest_valid, read_manifest, retained, write_atomic, write_manifest
from foundry.checkpointing.resume import attempt_dir, claimed, finish_attempt, resume_key
from foundry.checkpointing.writer import (
    ArithmeticMismatch,
    CheckpointEvery,
    ManifestCheckpointIO,
    _to_host,
    rng_states,
    set_rng_states,
)
from foundry.config import load_config
from foundry.runtime.arithmetic import arithmetic


def fake_checkpoint(step: int) -> dict:
    weight = torch.full((64, 8), float(step))
    return {
        "global_step": step,
        "state_dict": {"wte": weight, "head": weight},
        "optimizer_states": [{"m": torch.ones(3)}],
    }


def test_write_atomic_renames_into_place_and_hashes_what_it_wrote(tmp_path):
    path = tmp_path / "blob"
    sha, size = write_atomic(path, lambda f: f.write(b"hello " * 1000))
    assert path.read_bytes() == b"hello " * 1000 and size == 6000
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [p.name for p in tmp_path.iterdir()] == ["blob"]  # no temporary left behind


def test_a_write_that_fails_leaves_no_temporary_file_and_a_full_disk_names_the_folder(tmp_path):
    import errno

    from foundry.checkpointing.manifest import DiskFull

    def full(f):
        f.write(b"partial")
        raise RuntimeError("unexpected pos") from OSError(errno.ENOSPC, "No space left on device")

    def broken(f):
        raise ValueError("not a disk problem")

    with pytest.raises(DiskFull, match=f"no space left in {tmp_path} to write a.ckpt: \\d+ bytes free of \\d+"):
        write_atomic(tmp_path / "a.ckpt", full)
    with pytest.raises(ValueError, match="not a disk problem"):
        write_atomic(tmp_path / "a.ckpt", broken)
    assert list(tmp_path.iterdir()) == []


def test_retained_keeps_the_last_k_and_the_best():
    entries = [Entry(f"s{s}", s, "x", 1, loss) for s, loss in ((10, 3.0), (20, 2.0), (30, 2.5), (40, None), (50, None))]
    assert [e.step for e in retained(entries, 2)] == [20, 40, 50]
    assert [e.step for e in retained(entries, 4)] == [20, 30, 40, 50]
    assert [e.step for e in retained(entries[3:], 1)] == [50]  # nothing scored yet: no best


@pytest.mark.parametrize("async_save", [False, True])
def test_io_writes_manifest_link_and_prunes(tmp_path, async_save):
    io = ManifestCheckpointIO(tmp_path, keep_last=2, async_save=async_save)
    for step in (10, 20):
        io.save_checkpoint(fake_checkpoint(step), tmp_path / f"step-{step:06d}.ckpt")
    io.annotate(20, 1.5)  # the best so far: kept beyond the last two
    for step in (30, 40):
        io.save_checkpoint(fake_checkpoint(step), tmp_path / f"step-{step:06d}.ckpt")
    io.teardown()
    entries = read_manifest(tmp_path)
    assert [(e.step, e.val_loss) for e in entries] == [(20, 1.5), (30, None), (40, None)]
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == [
        "last.ckpt",
        "step-000020.ckpt",
        "step-000030.ckpt",
        "step-000040.ckpt",
    ]
    assert (tmp_path / "last.ckpt").samefile(tmp_path / "step-000040.ckpt")
    for e in entries:
        assert hashlib.sha256((tmp_path / e.file).read_bytes()).hexdigest() == e.sha256
    loaded = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert (
        loaded["state_dict"]["wte"].untyped_storage().data_ptr()
        == loaded["state_dict"]["head"].untyped_storage().data_ptr()
    )


def test_a_resume_that_fell_back_past_broken_checkpoints_drops_them_before_saving_again(tmp_path, caplog):
    """The newest two torn, the run resumes from the best (step 10); kept, they would outrank its step 20, which
    retention would then delete as it is written."""
    io = ManifestCheckpointIO(tmp_path, keep_last=2)
    io.save_checkpoint(fake_checkpoint(10), tmp_path / "step-000010.ckpt")
    io.annotate(10, 0.5)
    for step in (40, 50):
        io.save_checkpoint(fake_checkpoint(step), tmp_path / f"step-{step:06d}.ckpt")
        (tmp_path / f"step-{step:06d}.ckpt").write_bytes(b"torn")
    resumed = ManifestCheckpointIO(tmp_path, keep_last=2)
    resumed.start_at(latest_valid(tmp_path).step)
    assert [e.step for e in read_manifest(tmp_path)] == [10]
    assert "step-000040.ckpt, step-000050.ckpt" in caplog.text
    assert (tmp_path / "last.ckpt").samefile(tmp_path / "step-000010.ckpt")
    resumed.save_checkpoint(fake_checkpoint(20), tmp_path / "step-000020.ckpt")
    assert [e.step for e in read_manifest(tmp_path)] == [10, 20] and latest_valid(tmp_path).step == 20
    assert (tmp_path / "last.ckpt").samefile(tmp_path / "step-000020.ckpt")
    resumed.start_at(20)  # nothing past it: nothing changes
    assert [e.step for e in read_manifest(tmp_path)] == [10, 20]


def test_async_save_writes_a_point_in_time_copy(tmp_path):
    io = ManifestCheckpointIO(tmp_path, keep_last=1, async_save=True)
    checkpoint = fake_checkpoint(10)
    io.save_checkpoint(checkpoint, tmp_path / "step-000010.ckpt")
    checkpoint["state_dict"]["wte"].add_(100)  # training goes on mutating the weights in place
    io.teardown()
    assert torch.load(tmp_path / "step-000010.ckpt", weights_only=True)["state_dict"]["wte"].max().item() == 10.0


def test_to_host_copies_tied_tensors_once_into_reused_buffers():
    tied, staging = torch.randn(4, 4), {}
    copy = _to_host({"a": tied.detach(), "b": tied.detach(), "c": [tied[0]]}, staging)
    assert copy["a"] is copy["b"] and copy["a"].data_ptr() != tied.data_ptr()
    assert torch.equal(copy["c"][0], tied[0])
    tied.add_(1)
    again = _to_host({"a": tied.detach(), "b": tied.detach(), "c": [tied[0]]}, staging)
    assert again["a"].data_ptr() == copy["a"].data_ptr() and torch.equal(again["a"], tied)


def test_latest_valid_skips_missing_and_corrupt_checkpoints(tmp_path, caplog):
    entries = []
    for step in (10, 20, 30):
        sha, size = write_atomic(tmp_path / f"s{step}", lambda f, s=step: torch.save({"step": s}, f))
        entries.append(Entry(f"s{step}", step, sha, size))
    write_manifest(tmp_path, entries)
    assert latest_valid(tmp_path).step == 30
    data = bytearray((tmp_path / "s30").read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped: only the checksum can tell
    (tmp_path / "s30").write_bytes(bytes(data))
    (tmp_path / "s20").unlink()
    assert latest_valid(tmp_path).step == 10
    assert "s30 (step 30)" in caplog.text and "s20 (step 20)" in caplog.text
    assert latest_valid(tmp_path / "empty") is None


def test_rng_states_restore_every_generator_and_load_weights_only(tmp_path):
    states = rng_states()
    torch.save(states, tmp_path / "rng.pt")
    draws = (torch.rand(3).tolist(), random.random(), np.random.rand())
    set_rng_states(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (torch.rand(3).tolist(), random.random(), np.random.rand()) == draws


def test_resume_key_ignores_operational_settings_only():
    def key(*overrides, data="v1"):
        return resume_key(load_config(REPO_ROOT / "configs" / "tiny.yaml", list(overrides)), data)

    base = key()
    assert (
        key(
            "train.retries=5", "train.log_every_n_steps=7", "train.collective_timeout_s=9", "checkpoint.every_n_steps=3"
        )
        == base
    )
    assert key("evaluation.max_tokens=10", "registry.model_name=other") == base
    assert (
        key("align.train.max_steps=3", "align.prompts=[hi]") == base
    )  # copied into train by the align flow, or unused
    changed_keys = (key("train.seed=1"), key("train.max_steps=151"), key("model.n_layer=2"), key(data="v2"))
    for changed in (*changed_keys, key("align.beta=0.3"), key("align.sft_weight=0")):
        assert changed != base


def test_the_launcher_is_no_part_of_the_resume_key():
    """train.launcher and train.sbatch_args say where the ranks run, not what they compute: a run on SLURM resumes
    what the same run left locally, and a config from before these keys keeps its key (they are left out of it)."""
    local = load_config(None)
    on_slurm = load_config(None, ["train.launcher=slurm", "train.sbatch_args=--partition=gpu --time=5"])
    assert resume_key(on_slurm, "v1") == resume_key(local, "v1")


def test_resume_key_holds_the_arithmetic_the_settings_resolve_to(monkeypatch):
    """Threads, precision, device: what decides the float results, as resolved on this machine. A re-run with
    another thread count, or a retry on a machine with more cores under `cpu_threads: 0`, gets its own folder
    instead of resuming checkpoints it could not continue bit for bit. The world size is not in it (#56 point 3):
    a run that lost a node resumes on the rest."""

    def key(*overrides):
        return resume_key(load_config(REPO_ROOT / "configs" / "tiny.yaml", list(overrides)), "v1")

    cores = len(os.sched_getaffinity(0))
    base = key()
    assert key(f"train.cpu_threads={cores + 1}") != base
    assert key("train.precision=32-true") == base  # what auto resolves to on a CPU
    assert key("train.precision=bf16-mixed") != base
    assert key("train.deterministic=true") != base
    assert key("train.devices=2") == key("train.num_nodes=2") == base  # the cores shared by every world size
    assert key("train.devices=2", "train.cpu_threads=1") == key("train.cpu_threads=1") != base
    assert key("train.grad_accum_steps=2") != base  # the global batch at the world size the training starts at
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores + 2)))  # a machine with more cores
    assert key() != base


def test_arithmetic_of_a_cpu_run():
    t = load_config(REPO_ROOT / "configs" / "tiny.yaml", ["train.cpu_threads=3"]).train
    assert arithmetic(t) == {
        "threads": 3,
        "precision": "32-true",
        "device": "cpu",
        "world_size": 1,
        "torch": torch.__version__,
        "deterministic": False,
        "compile": False,
    }


def test_a_checkpoint_of_other_arithmetic_is_refused_and_an_old_one_accepted(tmp_path):
    io = ManifestCheckpointIO(tmp_path, 1)
    ours = {"threads": 2, "precision": "32-true", "device": "cpu", "world_size": 1}
    written = CheckpointEvery(io, 10, {**ours, "threads": 1}).state_dict()
    with pytest.raises(ArithmeticMismatch, match=r"\{'threads': \(1, 2\)\}"):
        CheckpointEvery(io, 10, ours).load_state_dict(written)
    same = CheckpointEvery(io, 10, ours)
    same.load_state_dict(CheckpointEvery(io, 10, dict(ours)).state_dict())
    assert same._rng_to_restore is not None
    CheckpointEvery(io, 10, ours).load_state_dict({"rng": written["rng"]})  # written before the arithmetic was


def test_resume_key_of_a_fine_tune_follows_the_parent_weights_not_their_path(tmp_path):
    """A crashed retrain resumes although its parent is downloaded to a new folder on the re-run."""
    for folder, weights in (("a", b"parent"), ("b", b"parent"), ("c", b"other parent")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "model.pt").write_bytes(weights)

    def key(folder):
        return resume_key(
            load_config(REPO_ROOT / "configs" / "tiny.yaml", [f"train.init_from={tmp_path / folder / 'model.pt'}"]),
            "v1",
        )

    assert key("a") == key("b") != key("c")


def test_a_second_trainer_of_the_same_attempt_waits_then_finds_it_finished(tmp_path):
    """Two runs of the same config on the same data: the second waits for the first (it used to fail with
    AttemptBusy), then finds the attempt moved to the first run and starts afresh."""
    import threading

    config = load_config(REPO_ROOT / "configs" / "tiny.yaml")
    attempt = attempt_dir(tmp_path, config, "v1")
    assert attempt == tmp_path / "checkpoints" / resume_key(config, "v1")
    order = []

    def second():
        with claimed(attempt):
            order.append(("second", attempt.exists()))

    with claimed(attempt):
        waiter = threading.Thread(target=second)
        waiter.start()
        waiter.join(1.0)
        assert waiter.is_alive() and order == []  # waiting, not failing
        attempt.mkdir()
        (attempt / "model.pt").write_text("weights")
        done = finish_attempt(attempt, tmp_path / "runs" / "r1" / "checkpoints")
        order.append(("first", True))
    waiter.join(10)
    assert order == [("first", True), ("second", False)]
    assert (done / "model.pt").read_text() == "weights" and not attempt.exists()
