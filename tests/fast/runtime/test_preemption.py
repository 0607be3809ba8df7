"""foundry/runtime/preemption.py: SIGTERM as a request, and the grace period's hard end. Training's answer (a
checkpoint at a step, then the exit, `foundry run` and ranks): tests/slow/training/test_preemption.py."""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from pathlib import Path

import psutil

from foundry.runtime import preemption

REPO = Path(__file__).resolve().parents[3]

# A process that arms preemption, starts a child and takes SIGTERM: while it trains (argv[2] "training") it is
# given the grace period, here to no avail, since it never looks at the request; before training, nothing waits.
# argv[4], when given: what the command's re-run does, for one that cannot resume (`foundry reproduce`, `search`).
STUCK = """
import os, signal, subprocess, sys, time
from pathlib import Path
from contextlib import nullcontext
from foundry.runtime import preemption
preemption.arm(float(sys.argv[1]), sys.argv[4] if len(sys.argv) > 4 else None)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
with preemption.training(Path(sys.argv[3])) if sys.argv[2] == "training" else nullcontext():
    os.kill(os.getpid(), signal.SIGTERM)
    assert preemption.requested()
    time.sleep(120)
"""


def stuck(
    grace: float, training: bool, folder: Path, rerun: str | None = None
) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", STUCK, str(grace), "training" if training else "starting", str(folder)]
        + ([rerun] if rerun else []),
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == preemption.EXIT_CODE == 143, proc.stderr  # 128 + SIGTERM, as a shell reports it
    child = int(proc.stdout.split()[0])
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    return proc, time.monotonic() - started


def test_a_training_that_ignores_the_request_ends_with_its_children_within_the_grace(tmp_path):
    proc, took = stuck(6.0, True, tmp_path)
    assert took < 6.0 + 2, took  # the interpreter's start included
    assert "SIGTERM: stopping at the next step with a checkpoint, within 6 s" in proc.stderr
    assert "preempted (SIGTERM) before training wrote a checkpoint" in proc.stderr
    assert "the grace period, 6 s, ran out first" in proc.stderr


def test_before_training_sigterm_ends_the_process_and_its_children_at_once(tmp_path):
    proc, took = stuck(30.0, False, tmp_path)
    assert took < 10, took  # not the 30 s grace
    assert "preempted (SIGTERM) before training wrote a checkpoint" in proc.stderr
    assert "ran out" not in proc.stderr


def test_the_message_names_the_checkpoint_and_its_step():
    stopped = preemption.Preempted(Path("/ckpt/step-000012.ckpt"), 12)
    assert str(stopped) == (
        "preempted (SIGTERM): training stopped at step 12, checkpoint /ckpt/step-000012.ckpt; "
        "the same command resumes from it"
    )
    copy = pickle.loads(pickle.dumps(stopped))
    assert (copy.checkpoint, copy.step, str(copy)) == (stopped.checkpoint, 12, str(stopped))


RERUN = "the same command starts it over"


def test_a_command_that_cannot_resume_says_what_its_rerun_does_and_ends_with_its_children(tmp_path):
    """`foundry search`'s flow process never trains itself (its trials run in its Dask children): at once."""
    proc, took = stuck(30.0, False, tmp_path, RERUN)
    assert took < 10, took
    assert f"foundry: preempted (SIGTERM): stopped; {RERUN}" in proc.stderr.splitlines()


def test_a_training_that_cannot_resume_names_its_step_but_no_checkpoint(tmp_path):
    """`foundry reproduce` trains from scratch on purpose: the checkpoint its stop wrote is not one to resume."""
    from foundry.checkpointing.manifest import Entry, write_manifest
    from foundry.core.digests import sha256_file

    checkpoint = tmp_path / "step-000010.ckpt"
    checkpoint.write_bytes(b"weights")
    write_manifest(tmp_path, [Entry(checkpoint.name, 10, sha256_file(checkpoint), checkpoint.stat().st_size)])
    proc, took = stuck(4.0, True, tmp_path, RERUN)
    assert took < 4.0 + 2, took
    assert f"foundry: preempted (SIGTERM): stopped at step 10; {RERUN}" in proc.stderr
    assert "checkpoint /" not in proc.stderr and "resumes" not in proc.stderr


def test_the_message_of_a_command_that_cannot_resume_survives_pickling():
    stopped = preemption.Preempted(Path("/ckpt/step-000012.ckpt"), 12, RERUN)
    assert str(stopped) == f"preempted (SIGTERM): stopped at step 12; {RERUN}"
    copy = pickle.loads(pickle.dumps(stopped))
    assert (copy.rerun, str(copy)) == (RERUN, str(stopped))
