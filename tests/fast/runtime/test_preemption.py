"""foundry/runtime/preemption.py: SIGTERM as a request, and the grace period's hard end. Training's answer (a
checkpoint at a step, then the exit, `foundry run` and ranks): tests/slow/training/test_preemption.py."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from foundry.runtime import preemption

REPO = Path(__file__).resolve().parents[3]

# A process that arms preemption, starts a child, takes SIGTERM and then never looks at the request: the grace
# period's end must stop it and its child anyway.
STUCK = """
import os, signal, subprocess, sys, time
from foundry.runtime import preemption
preemption.arm(float(sys.argv[1]))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
os.kill(os.getpid(), signal.SIGTERM)
assert preemption.requested()
time.sleep(120)
"""


def test_a_process_that_ignores_the_request_ends_with_its_children_within_the_grace():
    grace = 4.0
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", STUCK, str(grace)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    took = time.monotonic() - started
    assert proc.returncode == preemption.EXIT_CODE == 143, proc.stderr  # 128 + SIGTERM, as a shell reports it
    assert took < grace + 3, took  # the interpreter's start included
    assert "SIGTERM: stopping at the next step with a checkpoint, within 4 s" in proc.stderr
    assert "preempted (SIGTERM) before training wrote a checkpoint" in proc.stderr
    assert "the grace period, 4 s, ran out first" in proc.stderr
    child = int(proc.stdout.split()[0])
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_the_message_names_the_checkpoint_and_its_step():
    stopped = preemption.Preempted(Path("/ckpt/step-000012.ckpt"), 12)
    assert str(stopped) == (
        "preempted (SIGTERM): training stopped at step 12, checkpoint /ckpt/step-000012.ckpt; "
        "the same command resumes from it"
    )
