"""How much of a second core the machine gives: one CPU-bound process alone, then two side by side.

    python bench/cores.py [--work loop|clean|encode] [--nanny]

Each process is pinned to one core and does the same work, alone then two at once, three rounds; the best
round of each counts (the least disturbed). `loop` is a pure-Python loop; `clean` and `encode` are the two map
steps of `prepare` (`clean_partition` over the default corpus as one partition, `encode_chunk` over its train
split), each process on its own output, with the variables a Dask worker of `data.workers` gets (one thread
each). The ceiling for 2 workers against 1 (`bench/data_prep.py`) is the work two processes do in the time one
takes. With `--nanny`, the work alone instead, in a fresh process with the variables Dask's nanny sets before it
starts a worker and in one without, in the order A B B A: the headline is the time ratio (with / without).
The last line is the headline.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LOOP = 30_000_000
WORKS = ("loop", "clean", "encode")


def loop(_: dict, __: str) -> None:
    total = 0
    for i in range(LOOP):
        total += i * i % 7


def clean(setup: dict, out: str) -> None:
    from foundry.pretrain.clean import PartitionJob, clean_partition

    clean_partition(PartitionJob(0, setup["entries"], setup["cfg"], out))


def encode(setup: dict, out: str) -> None:
    from foundry.pretrain.shards import EncodeJob, encode_chunk

    texts = setup["train"]
    chunk = {"split": "train", "texts": texts, "start": 0, "end": os.path.getsize(texts), "out": f"{out}/t.bin"}
    encode_chunk(EncodeJob(setup["tokenizer"], (chunk,)))


def seconds(core: int, work: str, setup: dict) -> float:
    """In a fresh process (pinned before any thread of a library starts), the imports before the clock."""
    os.sched_setaffinity(0, {core})
    if work != "loop":
        import foundry.pretrain.clean  # noqa: F401
        import foundry.pretrain.shards  # noqa: F401
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        globals()[work](setup, out)
        return time.perf_counter() - start


def prepared(work: str, folder: Path) -> dict:
    """What the map steps read: the default corpus's files and config, its train split and tokenizer."""
    if work == "loop":
        return {}
    os.environ.setdefault("FOUNDRY_HOME", str(folder / "home"))
    from foundry.runtime.env import configure_environment

    configure_environment()
    from foundry.config import load_config
    from foundry.core.preparing import Preparing
    from foundry.data.acquire import acquire_source
    from foundry.pretrain.prepare import prepare

    config = load_config(None, [])
    manifest = acquire_source(config.data, folder / "source_manifest.json")
    out = folder / "prepared"
    if work == "encode":
        prepare(Preparing(manifest, config, out))
    return {
        "entries": manifest.entries,
        "cfg": config.data,
        "train": str(out / "train.jsonl"),
        "tokenizer": str(out / "tokenizer.json"),
    }


def alone_with(variables: dict[str, str], core: int, work: str, setup: dict) -> float:
    """The work alone, in a process started with `variables` added to this one's environment."""
    saved = dict(os.environ)
    os.environ.update(variables)
    try:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            return pool.apply(seconds, (core, work, setup))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def nanny(work: str, setup: dict, core: int) -> None:
    from worker_env import pre_spawn_variables

    variables = pre_spawn_variables()
    times: dict[bool, list[float]] = {True: [], False: []}
    for with_nanny in (False, True, True, False):
        times[with_nanny].append(alone_with(variables if with_nanny else {}, core, work, setup))
        print(f"{'with' if with_nanny else 'without':7s} {times[with_nanny][-1]:6.2f} s", flush=True)
    with_, without = sum(times[True]) / 2, sum(times[False]) / 2
    names = " ".join(f"{k}={v}" for k, v in sorted(variables.items()))
    print(f"cores ({work}, {names}): {with_ / without:.2f}x the time ({with_:.2f} vs {without:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", choices=WORKS, default="loop")
    parser.add_argument("--nanny", action="store_true", help="alone, with and without Dask's nanny variables")
    args = parser.parse_args()
    work = args.work
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        raise SystemExit("cores: needs 2 cores")
    from tasks.data_parallel import ONE_CORE

    os.environ.update(ONE_CORE)  # before the pool's processes start: they inherit it
    with tempfile.TemporaryDirectory() as folder:
        setup = prepared(work, Path(folder))
        if args.nanny:
            return nanny(work, setup, cores[0])
        alone, both = float("inf"), [float("inf")] * 2
        with multiprocessing.get_context("spawn").Pool(2, maxtasksperchild=1) as pool:
            for _ in range(3):
                alone = min(alone, pool.apply(seconds, (cores[0], work, setup)))
                both = min(both, pool.starmap(seconds, [(core, work, setup) for core in cores]), key=max)
    print(f"alone {alone:.2f} s; side by side on cores {cores[0]} and {cores[1]}: {both[0]:.2f} s, {both[1]:.2f} s")
    print(f"cores ({work}): 2 processes do {2 * alone / max(both):.2f}x the work of one")


if __name__ == "__main__":
    main()
