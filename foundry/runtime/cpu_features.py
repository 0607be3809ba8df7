"""Whether this machine's CPU computes bf16 natively: read from /proc/cpuinfo, so the memory planner can ask without
importing torch. On a CPU without AVX512-BF16 or AMX a bf16-autocast step of the default model ran 16x as long as a
float32 one (bench/README.md, "bf16 only where the CPU has bf16 instructions")."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from foundry.core import run_tags

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# `train.precision` values that resolve by the machine; a training run tags what they resolved to there.
DEVICE_PRECISIONS = ("auto", "bf16-if-native")
RESOLVED_PRECISION_TAG = run_tags.RESOLVED_PRECISION


def bf16_in_flags(cpuinfo: str) -> bool:
    """True when a `flags` line of a /proc/cpuinfo text names an instruction set that computes bf16."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and BF16_FLAGS & set(line.partition(":")[2].split()):
            return True
    return False


@cache
def cpu_has_bf16() -> bool:
    """False where /proc/cpuinfo cannot be read (not Linux): float32 is the choice that is never 16x slower."""
    try:
        return bf16_in_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        return False
