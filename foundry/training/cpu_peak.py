"""A CPU's peak FLOP/s for MFU, measured once: no data sheet names the peak of an arbitrary CPU.

The peak is the best rate of a dense matrix product (`MATMUL_N` square, the training's dtype) on one
rank's threads, so MFU on a CPU reads "share of the rate this machine's matmul reaches", not a share of
a vendor's theoretical peak. It is measured once per CPU model, thread count, dtype and torch version
and kept in `$FOUNDRY_HOME/cpu_peak_flops.json`: delete that file to measure again (say, on a quieter
machine), or set `train.peak_flops` to use a figure of your own.
"""

from __future__ import annotations

import json
import os
import platform
import time
import uuid
from pathlib import Path

import torch

from foundry.runtime.env import foundry_home

MATMUL_N = 1024
MEASURE_SECONDS = 0.5
CACHE = "cpu_peak_flops.json"
DTYPES = {"bf16": torch.bfloat16, "16": torch.float16}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_dtype(precision: str) -> torch.dtype:
    """The dtype most of the step's FLOPs run in: bf16/fp16 under mixed precision, fp32 otherwise."""
    return next((dtype for prefix, dtype in DTYPES.items() if precision.startswith(prefix)), torch.float32)


def measure_matmul_flops(threads: int, dtype: torch.dtype, seconds: float = MEASURE_SECONDS) -> float:
    """Best FLOP/s of `MATMUL_N`-square products over about `seconds` (after one warm-up product).
    Constant operands: drawing random ones would move the global RNG that training is seeded with."""
    a = torch.full((MATMUL_N, MATMUL_N), 0.5, dtype=dtype)
    out = torch.empty_like(a)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.mm(a, a, out=out)
        best, deadline = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            torch.mm(a, a, out=out)
            best = max(best, 2 * MATMUL_N**3 / (time.perf_counter() - start))
    finally:
        torch.set_num_threads(before)
    return best


def cpu_peak_flops(threads: int, precision: str, home: Path | None = None) -> float:
    """The cached peak for this CPU, thread count, dtype and torch; measured and cached when absent."""
    dtype = matmul_dtype(precision)
    key = f"{cpu_model()} | {threads} threads | {str(dtype).removeprefix('torch.')} | torch {torch.__version__}"
    path = (home or foundry_home()) / CACHE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        known[key] = measure_matmul_flops(threads, dtype)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{CACHE}.{uuid.uuid4().hex[:8]}")
        tmp.write_text(json.dumps(known, indent=1))
        os.replace(tmp, path)  # whole or not at all, whichever rank writes last
    return float(known[key])
