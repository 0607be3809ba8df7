"""Preemption: SIGTERM to `foundry run` mid-training writes a checkpoint at a step and ends every process within
`train.preempt_grace_s`, naming it; the same training then resumes from it, bitwise. Several ranks under the
elastic agent the same way. The config field: tests/fast/config/test_config_refusals.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from helpers_configs import tiny
from helpers_training import digest, wait_for_checkpoint
from homes import seeded_home

from foundry.checkpointing.manifest import latest_valid, read_manifest
from foundry.runtime.preemption import EXIT_CODE
from foundry.training.launch import launch

REPO = Path(__file__).resolve().parents[3]
GRACE_S = 20
# Dropout and gradient accumulation on, as the exact-resume tests have them; steps enough to be mid-training.
RESUMABLE = (
    "train.max_steps=40",
    "checkpoint.every_n_steps=10",
    "model.dropout=0.1",
    "train.grad_accum_steps=2",
    f"train.preempt_grace_s={GRACE_S}",
)


def terminated(proc: subprocess.Popen, family: dict[int, psutil.Process]) -> tuple[int, float, str]:
    """SIGTERM to `proc`: its exit status, the seconds it took, and the rest of its stderr; `family` (every process
    it started, seen while it ran) must all have ended with it."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    code = proc.wait(timeout=GRACE_S + 30)
    took = time.monotonic() - sent
    alive = [p for p in family.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for survivor in alive:  # a failing test leaves nothing behind either
        survivor.kill()
    assert not alive, [" ".join(p.cmdline())[:120] for p in alive]
    return code, took, rest


def descendants(pid: int, family: dict[int, psutil.Process]) -> None:
    try:
        family.update({p.pid: p for p in psutil.Process(pid).children(recursive=True)})
    except psutil.Error:
        pass


def test_sigterm_to_foundry_run_checkpoints_exits_in_time_and_the_rerun_resumes_bitwise(tmp_path):
    home = seeded_home(tmp_path / "home")  # its Prefect database made: the server starts without migrating
    overrides = [arg for key in (*RESUMABLE, "train.progress_every_s=0.2") for arg in ("--set", key)]
    command = [sys.executable, "-m", "foundry.cli", "run", "--config", str(REPO / "configs" / "tiny.yaml"), *overrides]
    env = {**os.environ, "FOUNDRY_HOME": str(home), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    family: dict[int, psutil.Process] = {}
    try:
        for line in proc.stderr:  # the train task's progress lines: "step N/40 ...", from "step 0/40"
            descendants(proc.pid, family)  # Prefect's temporary server among them
            if "Task run 'train" in line and (done := re.search(r" - step (\d+)/", line)) and int(done[1]) >= 1:
                break
        else:
            raise AssertionError(f"foundry run ended before training reported a step: {proc.wait()}")
        descendants(proc.pid, family)
        code, took, rest = terminated(proc, family)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == EXIT_CODE, rest[-3000:]
    assert took < GRACE_S + 5, took
    message = rest.strip().splitlines()[-1]
    assert message.startswith("foundry: preempted (SIGTERM)"), rest[-3000:]
    checkpoint = Path(message.split("checkpoint ")[1].split(";")[0])
    attempt = checkpoint.parent
    newest = latest_valid(attempt)
    assert newest is not None and attempt / newest.file == checkpoint and checkpoint.is_file()
    assert 0 < newest.step < 40 and not (attempt / "model.pt").exists()
    (log_file,) = (home / "logs").glob("run-*.log")
    assert message in log_file.read_text()

    # The re-run's train task resumes the attempt it finds by its key: that folder, from that checkpoint.
    (data_dir,) = (home / "hydrated").glob("[!.]*")  # its version, beside the pull cache
    config = tiny(*RESUMABLE)
    resumed = launch(config, data_dir, attempt, None, data_dir.name)
    assert [e.step for e in read_manifest(attempt)][-1] == 40
    uninterrupted = launch(config, data_dir, tmp_path / "uninterrupted", None, data_dir.name)
    assert digest(resumed) == digest(uninterrupted)


def test_sigterm_to_the_agent_stops_every_rank_at_one_step_and_the_resume_is_bitwise(tiny_dataset, tmp_path):
    """Two ranks under the elastic agent, in a process of their own as `foundry run` starts them: SIGTERM to it
    reaches the ranks through the agent; they agree on a step, save it, and exit within the grace."""
    config = tiny(*RESUMABLE, "train.devices=2")
    folder = tmp_path / "ckpt"
    script = (
        "import sys; from pathlib import Path; from foundry.config import validate; "
        "from foundry.runtime import preemption; from foundry.training.launch import launch\n"
        f"config = validate({config.model_dump(mode='json')!r}); preemption.arm(config.train.preempt_grace_s)\n"
        "try:\n"
        f"    launch(config, Path({str(tiny_dataset)!r}), Path({str(folder)!r}), None, 'v')\n"
        "except preemption.Preempted as stopped:\n"
        "    print(stopped, file=sys.stderr); sys.exit(preemption.EXIT_CODE)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True)
    family: dict[int, psutil.Process] = {}
    try:
        wait_for_checkpoint(folder, lambda: proc.poll() is None)
        descendants(proc.pid, family)
        assert len([p for p in family.values() if "foundry.training.worker" in " ".join(p.cmdline())]) == 2
        code, took, rest = terminated(proc, family)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == EXIT_CODE, rest[-3000:]
    assert took < GRACE_S + 5, took
    newest = latest_valid(folder)
    assert rest.strip().splitlines()[-1].startswith(f"preempted (SIGTERM): training stopped at step {newest.step}")
    assert str(folder / newest.file) in rest and 0 < newest.step < 40
    assert "rank 0: preempted" in rest and "rank 1: preempted" in rest  # each rank said where it stopped

    resumed = launch(config, tiny_dataset, folder, None, "v")
    uninterrupted = launch(config, tiny_dataset, tmp_path / "uninterrupted", None, "v")
    assert digest(resumed) == digest(uninterrupted)
