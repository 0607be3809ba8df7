"""How much of a second core the machine gives: one CPU-bound Python process alone, then two side by side.

    python bench/cores.py

Each process is pinned to one core and runs the same pure-Python loop, alone then two at once, three rounds; the
best round of each counts (the least disturbed). The baseline is the loop alone on the first core;
the ceiling for 2 workers against 1 (`bench/data_prep.py`) is the work two processes do in the time one takes.
The last line is the headline.
"""

from __future__ import annotations

import multiprocessing
import os
import time

LOOP = 30_000_000


def loop_seconds(core: int) -> float:
    os.sched_setaffinity(0, {core})
    start, total = time.perf_counter(), 0
    for i in range(LOOP):
        total += i * i % 7
    return time.perf_counter() - start


def main() -> None:
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        raise SystemExit("cores: needs 2 cores")
    alone, both = float("inf"), [float("inf")] * 2
    with multiprocessing.Pool(2) as pool:
        for _ in range(3):
            alone = min(alone, loop_seconds(cores[0]))
            both = min(both, pool.map(loop_seconds, cores), key=max)
    print(f"alone {alone:.2f} s; side by side on cores {cores[0]} and {cores[1]}: {both[0]:.2f} s, {both[1]:.2f} s")
    print(f"cores: 2 processes do {2 * alone / max(both):.2f}x the work of one")


if __name__ == "__main__":
    main()
