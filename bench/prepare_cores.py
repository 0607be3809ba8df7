"""`foundry prepare` as the README runs it, on one core and on all of them: the cores a user has, used by default.

    python bench/prepare_cores.py [--copies 13] [--repeats 2] [--corpus FOLDER] [--dask]

`foundry acquire`, then `foundry prepare` (the gate included) in a fresh process each time, with the package defaults
and a fresh output folder, in these kinds:
- pinned: the default pinned to one core (`taskset -c 0`, here `sched_setaffinity` before it starts): one worker, the
  steps all in its own process;
- default: the default on every core (`data.workers: 0`, one worker process a core);
- workers-2: `data.workers: 2`;
- dask-2 (with `--dask`): `data.scheduler: local`, `data.workers: 2`, a local Dask cluster whose steps are Prefect
  task runs, with the temporary Prefect server `foundry prepare` starts when none is configured.
Each round runs every kind once, in an order reversed each round (ABBA), timed from the command's start to its exit
(interpreter start included). The corpus: `--corpus`, or `--copies` copies of the interpreter's standard library with
letters rotated per copy (13 copies: 158 MB; `data_prep.rotated_corpus`). Every run must write the same dataset,
byte for byte (the token shards, `manifest.json`, the gate's report), or the benchmark says so and exits 1. The last
line is the headline: the default against the pinned default, and `data.workers: 2` against the default (medians).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from data_prep import conditions, rotated_corpus

ROOT = Path(__file__).resolve().parent.parent
FOUNDRY = [sys.executable, "-m", "foundry.cli"]
KINDS = {
    "pinned": [],
    "default": [],
    "workers-2": ["--set", "data.workers=2"],
    "dask-2": ["--set", "data.scheduler=local", "--set", "data.workers=2"],
}


def dataset_digest(folder: Path, report: Path) -> str:
    """Of every file the dataset holds and of the gate's report: the same bytes give the same digest."""
    digest = hashlib.sha256()
    for path in [*sorted(p for p in folder.rglob("*") if p.is_file()), report]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def prepare(kind: str, work: Path, corpus: Path, env: dict) -> tuple[float, str]:
    out = work / f"{kind}-{time.monotonic_ns()}" / "prepared"
    first_core = sorted(os.sched_getaffinity(0))[:1]
    pin = (lambda: os.sched_setaffinity(0, first_core)) if kind == "pinned" else None
    command = [*FOUNDRY, "prepare", "--set", f"data.source={corpus}", "--manifest", str(work / "m.json")]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "--out", str(out), *KINDS[kind]], env=env, cwd=work, preexec_fn=pin, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{kind} failed:\n{done.stderr[-3000:]}")
    digest = dataset_digest(out, out.parent / "prepared_validation.json")
    shutil.rmtree(out.parent)
    return seconds, digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=13, help="copies of the standard library in the corpus")
    parser.add_argument("--corpus", type=Path, help="a folder to prepare instead")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; each kind once a round, the median counts")
    parser.add_argument("--dask", action="store_true", help="also a local Dask cluster of 2 workers")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-prepare-cores-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(FOUNDRY_HOME=str(work / "home"), PYTHONPATH=str(ROOT))
    try:
        corpus = args.corpus or work / "corpus"
        if args.corpus is None:
            stdlib = work / "stdlib.json"
            subprocess.run([*FOUNDRY, "acquire", "--out", str(stdlib)], env=env, cwd=work, check=True)
            from foundry.core.contracts import SourceManifest

            rotated_corpus(SourceManifest.read(stdlib), args.copies, corpus)
        acquired = subprocess.run(
            [*FOUNDRY, "acquire", "--set", f"data.source={corpus}", "--out", str(work / "m.json")],
            env=env,
            cwd=work,
            check=True,
            capture_output=True,
            text=True,
        )
        print(f"{conditions()}; corpus: {acquired.stdout.strip()}", flush=True)
        kinds = [k for k in KINDS if k != "dask-2" or args.dask]
        seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
        digests = set()
        for round_ in range(args.repeats):
            for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
                took, digest = prepare(kind, work, corpus, env)
                seconds[kind].append(took)
                digests.add(digest)
                print(f"round {round_ + 1} {kind}: {took:.1f} s, dataset {digest[:12]}", flush=True)
        print(conditions().replace("at start", "at end"))
        if len(digests) != 1:
            print("prepare_cores: the runs wrote different datasets; no figures (see above)")
            sys.exit(1)
        median = {kind: statistics.median(times) for kind, times in seconds.items()}
        figures = [f"{kind} {median[kind]:.1f} s" for kind in kinds]
        print(
            f"prepare_cores (median of {args.repeats}; {', '.join(figures)}): the default on "
            f"{len(os.sched_getaffinity(0))} cores {median['pinned'] / median['default']:.2f}x faster than pinned to "
            f"one (target >= 1.7x); data.workers: 2 {median['default'] / median['workers-2']:.2f}x the default's "
            "speed (target >= 1.0x); the same bytes in every run"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
