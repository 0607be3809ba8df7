"""The two GPU scripts' own CPU modes, each in a process of its own, so that they still run when a GPU is next
lent (bench/README.md has their figures). Clipping under bf16-mixed: tests/fast/training/test_gpu_paths.py."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO_ROOT


def run_script(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_gpu_mfu_smoke_runs_both_loops_on_cpu():
    headline = run_script("bench/gpu_mfu.py", "--smoke", "--steps", "20", "--warmup", "5")
    assert headline.startswith("gpu_mfu: ") and "MFU ours" in headline and "code check only" in headline


def test_fsdp_smoke_script_trains_rebuilds_and_resumes_on_cpu(tiny_dataset):
    headline = run_script("bench/gpu_fsdp_smoke.py", str(tiny_dataset), "--cpu", "--steps", "20")
    assert headline.startswith("gpu_fsdp_smoke: ok, SingleDeviceStrategy/none/32-true")
    assert "resume from step 15 bitwise exact" in headline
