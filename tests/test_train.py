"""Training: one process in-process, several as real processes; exact resume; failures named."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from foundry.checkpointing.manifest import MANIFEST, latest_valid, read_manifest
from foundry.checkpointing.resume import attempt_dir
from foundry.config import ConfigError, load_config
from foundry.training.launch import (
    TrainingFailed,
    launch,
    launch_local,
    rank_environments,
    start_ranks,
    supervise,
    worker_command,
)
from foundry.training.trainer import build_module, lookup_peak_flops, resolve_precision, weights_digest
from models.gpt import load_gpt

REPO_ROOT = Path(__file__).resolve().parent.parent


def tiny(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", list(overrides))


def digest(model_pt: Path) -> str:
    return weights_digest(torch.load(model_pt, weights_only=True)["state_dict"])


def wait_for_checkpoint(directory: Path, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not read_manifest(directory):
        assert proc.poll() is None, f"training exited with {proc.returncode} before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.02)


# --- one process ---------------------------------------------------------------------------------


def test_rank_environments_follow_node_major_order():
    envs = rank_environments(tiny("train.num_nodes=2", "train.devices=2"), 29500)
    assert [(e["NODE_RANK"], e["LOCAL_RANK"], e["RANK"]) for e in envs] == [
        ("0", "0", "0"),
        ("0", "1", "1"),
        ("1", "0", "2"),
        ("1", "1", "3"),
    ]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"} and {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}


def test_single_process_trains_and_the_checkpoint_rebuilds_the_model(tiny_dataset, tmp_path):
    config = tiny("train.max_steps=12", "checkpoint.every_n_steps=5")
    path = launch(config, tiny_dataset, tmp_path / "ckpt", None, "v-test")
    model = load_gpt(path)
    saved = torch.load(path, weights_only=True)
    assert saved["data_version"] == "v-test" and saved["config"]["train"]["max_steps"] == 12
    assert model.config.n_embd == config.model.n_embd
    # Every 5 steps and at the end; the last two kept; last.ckpt is the newest.
    assert [e.step for e in read_manifest(tmp_path / "ckpt")] == [10, 12]
    assert (tmp_path / "ckpt" / "last.ckpt").samefile(tmp_path / "ckpt" / "step-000012.ckpt")
    assert (tmp_path / "ckpt" / "weights.rank0.sha256").read_text().strip() == digest(path)


# Dropout and gradient accumulation on: the RNG states and the loader position must both be restored.
RESUMABLE = ("train.max_steps=40", "checkpoint.every_n_steps=10", "model.dropout=0.1", "train.grad_accum_steps=2")


@pytest.fixture(scope="module")
def uninterrupted(tiny_dataset, tmp_path_factory) -> Path:
    """The checkpoint folder of one run of RESUMABLE from start to end, never stopped."""
    folder = tmp_path_factory.mktemp("uninterrupted") / "ckpt"
    launch(tiny(*RESUMABLE), tiny_dataset, folder, None, "v")
    return folder


def test_corrupt_latest_checkpoint_falls_back_and_the_resume_is_bitwise_exact(
    uninterrupted, tiny_dataset, tmp_path, caplog
):
    folder = shutil.copytree(uninterrupted, tmp_path / "ckpt")
    latest = folder / "step-000040.ckpt"
    with open(latest, "r+b") as f:  # a write cut short
        f.truncate(latest.stat().st_size // 2)
    (folder / "model.pt").unlink()
    assert latest_valid(folder).step == 30
    assert "step-000040.ckpt" in caplog.text and "does not match" in caplog.text
    assert digest(launch(tiny(*RESUMABLE), tiny_dataset, folder, None, "v")) == digest(uninterrupted / "model.pt")
    assert [e.step for e in read_manifest(folder)] == [30, 40]  # step 40 written again, intact
    assert latest_valid(folder).step == 40


@pytest.mark.slow
def test_kill_9_then_the_same_run_resumes_bitwise_exact(uninterrupted, tiny_dataset, tmp_path, monkeypatch):
    """The pipeline's train task finds the killed attempt by its key, resumes it and says from where."""
    from mlflow import MlflowClient

    from foundry import tracking
    from foundry.contracts import DataVersion, RunContext
    from tasks.training import train_task

    config = tiny(*RESUMABLE)
    # What a Dask cluster started earlier in the same process leaves behind (its nanny sets these in
    # its parent); inherited, they made the killed run sum with one thread and the resumed one with two.
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(name, "1")

    home = tmp_path / "home"
    attempt = attempt_dir(home, config, "v-kill")
    proc = start_ranks(config, worker_command(config, tiny_dataset, attempt, None, "v-kill", None))[0]
    wait_for_checkpoint(attempt, proc)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    killed_at = latest_valid(attempt).step
    assert 0 < killed_at < config.train.max_steps

    run_id = tracking.start_pipeline_run(config)
    run = RunContext(run_id=run_id, dir=tmp_path / "run", home=home)
    model_pt = train_task.fn(config, tiny_dataset, DataVersion(data_version="v-kill", remote=""), run)
    assert digest(model_pt) == digest(uninterrupted / "model.pt")
    client = MlflowClient()
    assert client.get_run(run_id).data.tags["resumed_from_step"] == str(killed_at)
    assert {a.path for a in client.list_artifacts(run_id, "checkpoints")} == {
        "checkpoints/last.ckpt",
        f"checkpoints/{MANIFEST}",
    }
    # Finished: moved to the run's folder, so the next identical run starts afresh.
    assert not attempt.exists() and model_pt == run.dir / "checkpoints" / "model.pt"


# --- several processes -----------------------------------------------------------------------------


@pytest.mark.slow
def test_two_nodes_match_one_process_with_the_same_global_batch(tiny_dataset, tmp_path):
    from foundry import tracking

    common = ("train.max_steps=20", "train.log_every_n_steps=1", "checkpoint.every_n_steps=10", "train.peak_flops=1e11")
    runs = {}
    for name, overrides in (("one", ["train.batch_size=8"]), ("two", ["train.batch_size=4", "train.num_nodes=2"])):
        config = tiny(*common, *overrides)
        run_id = tracking.start_pipeline_run(config)
        runs[name] = (run_id, launch(config, tiny_dataset, tmp_path / name, run_id, "v-ddp"))

    rank_digests = [(tmp_path / "two" / f"weights.rank{r}.sha256").read_text() for r in (0, 1)]
    assert rank_digests[0] == rank_digests[1]  # replicas bitwise identical
    losses = {name: [v for _, v in tracking.metric_history(run_id, "train/loss")] for name, (run_id, _) in runs.items()}
    assert len(losses["two"]) == len(losses["one"]) == 20
    np.testing.assert_allclose(losses["two"], losses["one"], rtol=1e-4)  # only the reduction order differs
    one, two = (torch.load(p, weights_only=True)["state_dict"] for _, p in runs.values())
    assert max((one[k] - two[k]).abs().max().item() for k in one) < 1e-4

    metrics = tracking.client().get_run(runs["two"][0]).data.metrics
    for key in ("train/lr", "train/tokens_per_sec", "train/step_time_ms", "train/data_wait_ms"):
        assert metrics[key] > 0, key
    assert 0 < metrics["train/mfu"] < 1


@pytest.mark.slow
def test_a_stuck_rank_ends_the_group_by_timeout_and_is_named(tiny_dataset, tmp_path):
    config = tiny(
        "train.num_nodes=2", "train.max_steps=5000", "train.collective_timeout_s=6", "checkpoint.every_n_steps=5"
    )
    procs = start_ranks(config, worker_command(config, tiny_dataset, tmp_path / "ckpt", None, "v", None))
    try:
        wait_for_checkpoint(tmp_path / "ckpt", procs[0])
        procs[1].send_signal(signal.SIGSTOP)  # alive but silent, like a node whose network died
        procs[0].wait(timeout=config.train.collective_timeout_s + 60)  # ends by itself: no hang
        assert procs[0].returncode != 0
        with pytest.raises(TrainingFailed, match=r"rank 0 of 2 exited with code \d+; then rank 1 was still running"):
            supervise(procs, poll_seconds=0.1, grace_seconds=1)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_killed_rank_is_named_and_the_others_are_stopped():
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    procs = [subprocess.Popen(sleeper) for _ in range(3)]
    os.kill(procs[2].pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(
        TrainingFailed, match=r"rank 2 of 3 was killed by SIGKILL; then rank 0 was still running after 1 s"
    ):
        supervise(procs, poll_seconds=0.05, grace_seconds=1)
    assert time.monotonic() - started < 10 and all(p.poll() is not None for p in procs)


@pytest.mark.slow
def test_a_failing_rank_is_named(tmp_path):
    with pytest.raises(TrainingFailed, match=r"rank \d of 2 exited with code"):
        launch_local(tiny("train.num_nodes=2"), tmp_path / "no-such-dataset", tmp_path / "ckpt", None, "v")


# --- settings --------------------------------------------------------------------------------------


def test_peak_flops_are_looked_up_by_device_name():
    assert lookup_peak_flops("NVIDIA H200", "bf16-mixed") == 989e12
    assert lookup_peak_flops("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989e12
    assert lookup_peak_flops("NVIDIA H100 PCIe", "bf16-mixed") == 756e12
    assert lookup_peak_flops("NVIDIA A100-SXM4-80GB", "32-true") == 19.5e12
    assert lookup_peak_flops("Some CPU", "bf16-mixed") == 0.0


def test_precision_auto_is_bf16_on_gpu_and_fp32_on_cpu():
    assert resolve_precision(tiny("train.accelerator=cpu").train) == "32-true"
    assert resolve_precision(tiny("train.accelerator=gpu").train) == "bf16-mixed"
    assert resolve_precision(tiny("train.accelerator=gpu", "train.precision=32-true").train) == "32-true"


def test_fsdp_is_gpu_only_and_keeps_full_state_dicts():
    from lightning.pytorch.strategies import FSDPStrategy

    from foundry.training.trainer import _strategy

    with pytest.raises(ConfigError, match="strategy fsdp needs accelerator gpu"):
        tiny("train.strategy=fsdp")
    strategy = _strategy(tiny("train.strategy=fsdp", "train.accelerator=gpu", "train.collective_timeout_s=42").train)
    assert isinstance(strategy, FSDPStrategy) and strategy._state_dict_type == "full"
    assert strategy._timeout.total_seconds() == 42


def test_compile_keeps_parameter_names():
    plain, compiled = (build_module(tiny(f"train.compile={flag}"), 512) for flag in ("false", "true"))
    assert list(compiled.state_dict()) == list(plain.state_dict())


def test_weights_digest_sees_one_flipped_bit():
    state = {"a": torch.arange(6, dtype=torch.float32).view(2, 3), "b": torch.ones(2, dtype=torch.bfloat16)}
    same = {k: v.clone() for k, v in state.items()}
    assert weights_digest(state) == weights_digest(same)
    same["a"].view(torch.int32)[0, 0] ^= 1
    assert weights_digest(state) != weights_digest(same)
