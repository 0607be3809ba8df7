"""SIGTERM to `foundry search` while its trials train (on its Dask workers): it ends them and itself within
`train.preempt_grace_s`, saying that the re-run continues the study, and the same command then does, the running
trials started over. A trial keeps no checkpoint to resume from (foundry/cli/search.py). kill -9 of a search:
tests/slow/search/test_search_flow.py; the message and the exit: tests/fast/runtime/test_preemption.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
from conftest import REPO_ROOT
from homes import seeded_home

from foundry.cli.search import SEARCH_RERUN
from foundry.runtime.preemption import EXIT_CODE

GRACE_S = 20
N_TRIALS = 4
SETS = (f"search.n_trials={N_TRIALS}", "search.trial_max_steps=60", f"train.preempt_grace_s={GRACE_S}")


def test_sigterm_to_foundry_search_ends_its_trials_and_the_rerun_continues_the_study(tmp_path):
    home = seeded_home(tmp_path / "home")  # its Prefect database made: the server starts without migrating
    argv = [sys.executable, "-m", "foundry.cli", "search", "--config", str(REPO_ROOT / "configs" / "tiny.yaml")]
    argv += [arg for key in SETS for arg in ("--set", key)]
    env = {**os.environ, "FOUNDRY_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    family: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 300
        while not any("GPU available" in line for line in list(lines)):  # a trial's Trainer, on a worker
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.1)
        time.sleep(1)  # into its training
        family = {p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)}
        assert any("spawn_main" in " ".join(p.cmdline()) for p in family.values())  # the Dask workers
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=GRACE_S + 30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    alive = [p for p in family.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for survivor in alive:
        survivor.kill()
    assert not alive
    assert code == EXIT_CODE, "".join(lines)[-3000:]
    assert took < GRACE_S + 5, took
    assert f"foundry: preempted (SIGTERM): stopped; {SEARCH_RERUN}\n" in lines, "".join(lines)[-3000:]

    again = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    counts = dict((state, int(n)) for n, state in re.findall(r"(\d+) (complete|fail|pruned)", again.stdout))
    assert counts.get("complete", 0) + counts.get("pruned", 0) == N_TRIALS, again.stdout
