"""Data preparation throughput: Prefect tasks on Dask (1 and 2 workers, a local or an external cluster)
against a plain single-core loop.

    python bench/data_prep.py [--repeats 3] [--kinds K,K,...] [--scale 10 | --no-scale]
                              [--scaled-kinds K,K,... | --scale-all] [--scale-repeats 3]

All runs prepare the default corpus (`stdlib://`, the same acquired files) with the default config.
The kinds:
- plain: the same steps done by the libraries, called directly in one loop, holding the corpus in
  lists (read, decode, normalise, scrub, quality rules, sha256, datasketch MinHash and LSH, the
  byte-guaranteed holdout, tokenizers BPE training on the same content-hash sample of at most
  `tokenizer.max_train_bytes` of the train split, encoding, numpy token files);
- in-process: `run_prepare` with `data.workers: 1` (the default, `foundry prepare`: no cluster);
- dask-1 / dask-2: `run_prepare` with `data.scheduler: local`, `data.workers: 1|2`: a Prefect flow whose
  partition steps are task runs on a Dask LocalCluster (against a Prefect server started beforehand,
  as in the pipeline), cluster start and shutdown included;
- dask-1-warm / dask-2-warm: the same on a LocalCluster started, and warmed by a small preparation,
  before the clock (`data.scheduler` its address);
- dask-ext-2: `data.scheduler` the address of an external cluster, started before the clock as
  separate processes on loopback: `dask scheduler` and 2 x `dask worker` (1 thread, no memory limit,
  the pipeline's worker environment), cold (bench/_dask_cluster.py).
Each run is a fresh process pinned with sched_setaffinity to as many cores as it has workers (the
plain loop and in-process: one), tokenizer threads included; Dask workers, local or external, inherit
the pinning. Imports happen before the clock starts. Every cluster is shut down and its processes
waited for before peak RSS is read, so each run reports the peak RSS of its own process (`self`), of
its largest child process (`children`: a Dask worker) and the larger of the two (`peak RSS`: the
memory of the largest single process); the external cluster's also per worker and for the scheduler.
Every run reports the sha256 of its train and holdout token streams: all runs of one corpus must
agree (same documents, same tokens), or the benchmark says so and exits 1. Each kind runs `--repeats`
times, interleaved with the others so drifting load hits them alike, and the median counts.
`--kinds` chooses the 1x kinds (default: all but dask-ext-2).
`--scale N` also prepares N copies of the corpus (letters rotated per copy, so no copy is a duplicate
of another; 13 copies are 158 MB) with the `--scaled-kinds` (default in-process), `--scale-repeats`
times, to show how time and peak memory follow the corpus size; `--scale-all` is plain, in-process,
dask-1 and dask-2 (tens of minutes on 2 cores), where the cluster's fixed cost weighs less. The last
line is the headline: 2 workers (dask-2, dask-ext-2) against 1 (in-process) at each size, and each
kind's peak RSS per process on the scaled corpus against 1x.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _dask_cluster import start_cluster

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def plain_loop(entries: list, config, out: Path) -> dict:
    """Every step of preparation, by the underlying libraries, in one loop over an in-memory corpus."""
    import hashlib
    import zlib

    import numpy as np
    from datasketch import MinHash, MinHashLSH
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from foundry.data.privacy import pii
    from foundry.data.quality import quality_problem
    from foundry.pretrain.clean import holdout_set, normalise
    from foundry.pretrain.dedup import shingles

    d = config.data
    perms = MinHash(num_perm=d.near_dup_num_perm, seed=1, scheme="affine32").permutations
    lsh = MinHashLSH(threshold=d.near_dup_threshold, num_perm=d.near_dup_num_perm, weights=(0.05, 0.95))
    seen, signatures, docs = set(), [], []
    for entry in entries:
        raw = Path(entry.path).read_bytes()
        if not raw.strip() or b"\x00" in raw:
            continue
        try:
            text = raw.decode("utf-8").removeprefix("\ufeff")
        except UnicodeDecodeError:
            continue
        text, _ = pii.scrub(normalise(text), d.pii)
        if quality_problem(text, d):
            continue
        data = text.encode()
        sha = hashlib.sha256(data).hexdigest()
        m = MinHash(num_perm=d.near_dup_num_perm, seed=1, hashfunc=zlib.crc32, permutations=perms, scheme="affine32")
        m.update_batch(shingles(text, d.near_dup_shingle_words))
        if sha in seen or any(np.mean(signatures[k] == m.hashvalues) >= d.near_dup_threshold for k in lsh.query(m)):
            continue
        seen.add(sha)
        lsh.insert(len(signatures), m)
        signatures.append(m.hashvalues)
        docs.append((sha, len(data), text, entry.name))
    holdout = holdout_set([(sha, size) for sha, size, _, _ in docs], d.holdout_fraction)
    splits = {
        "train": [doc for doc in docs if doc[0] not in holdout],
        "holdout": [doc for doc in docs if doc[0] in holdout],
    }
    for split, rows in splits.items():
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"text": t, "source": s}, ensure_ascii=False) + "\n" for _, _, t, s in rows)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.tokenizer.vocab_size,
        min_frequency=config.tokenizer.min_frequency,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # The pipeline's sample: documents whose content hash falls below max_train_bytes / train bytes.
    rate = config.tokenizer.max_train_bytes / max(1, sum(size for _, size, _, _ in splits["train"]))
    sample = [t for sha, _, t, _ in splits["train"] if rate >= 1 or int(sha[:8], 16) < rate * 0x1_0000_0000]
    tokenizer.train_from_iterator(sample, trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    eot, tokens = tokenizer.token_to_id("<|endoftext|>"), {}
    for split, rows in splits.items():
        ids = [i for enc in tokenizer.encode_batch_fast([t for _, _, t, _ in rows]) for i in (*enc.ids, eot)]
        np.asarray(ids, dtype="<u2").tofile(out / f"{split}.bin")
        tokens[split] = len(ids)
    return {
        "docs_out": len(docs),
        "train_tokens": tokens["train"],
        "holdout_tokens": tokens["holdout"],
    }


def stream_digest(files: list[Path]) -> str:
    """sha256 of the files' bytes, one after the other: equal for equal token streams of one dtype."""
    import hashlib

    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _timed_steps(timings: dict, dask: bool) -> None:
    """Wall time per step of `prepare`, by wrapping its steps (in the process that runs `prepare`)."""
    import foundry.pretrain.prepare as prep

    def wrap(name, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timings[name] = timings.get(name, 0.0) + time.perf_counter() - start

        return timed

    prep.select_documents = wrap("dedup+split", prep.select_documents)
    prep._tokenizer = wrap("train tokenizer", prep._tokenizer)  # its child process included
    prep.assemble_shards = wrap("shards", prep.assemble_shards)
    original = prep.prepare

    def prepare(job):
        calls = iter(("clean (map)", "encode (map)"))
        mapper = wrap_map(job.running.mapper or prep.serial_map, calls)
        return original(dataclasses.replace(job, running=dataclasses.replace(job.running, mapper=mapper)))

    def wrap_map(mapper, calls):
        return lambda step, jobs: wrap(next(calls), mapper)(step, jobs)

    prep.prepare = prepare
    if dask:  # the flow calls prepare through its module's attribute
        import tasks.data_parallel

        tasks.data_parallel.prepare = prepare


def child(kind: str, workers: int, manifest_path: Path, out: Path) -> None:
    """One measurement, in this (pinned) process; prints a JSON line."""
    os.environ.setdefault("FOUNDRY_HOME", str(out.parent / "home"))
    from foundry.runtime.env import configure_environment

    configure_environment()
    from foundry.config import load_config
    from foundry.core.contracts import SourceManifest

    manifest = SourceManifest.read(manifest_path)
    timings: dict[str, float] = {}
    import datasketch  # noqa: E401,F401  (imports before the clock)

    if kind == "plain":
        config = load_config(None, [])
        out.mkdir(parents=True)
        start = time.perf_counter()
        result = plain_loop(manifest.entries, config, out)
        seconds = time.perf_counter() - start
        result["tokens_sha256"] = {split: stream_digest([out / f"{split}.bin"]) for split in ("train", "holdout")}
        processes = {}
    else:
        from tasks.data_parallel import run_prepare

        address, stop = start_cluster(kind, workers, out.parent / "dask")  # -warm, dask-ext: before the clock
        try:
            scheduler = ["data.scheduler=" + (address or "local"), f"data.workers={workers}"]
            config = load_config(None, ["data.workers=1"] if kind == "in-process" else scheduler)
            if kind != "in-process":
                import distributed  # noqa: E401,F401

            _timed_steps(timings, dask=kind != "in-process")
            start = time.perf_counter()
            m = run_prepare(manifest, config, out, progress=False).manifest
            seconds = time.perf_counter() - start
        finally:
            processes = stop()  # every process of the cluster waited for: in RUSAGE_CHILDREN from here on
        result = {
            "docs_out": m.count("docs_out"),
            "train_tokens": m.train_tokens,
            "holdout_tokens": m.holdout_tokens,
            "tokens_sha256": {
                split: stream_digest([out / s.file for s in m.shards if s.split == split])
                for split in ("train", "holdout")
            },
        }
    # ru_maxrss of the children is the largest single child's: with our own, the peak of any one process.
    rss_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    rss = {"rss_mb": max(rss_self, rss_children), "rss_self_mb": rss_self, "rss_children_mb": rss_children}
    print(json.dumps({"seconds": seconds, **rss, **processes, "steps": timings, **result}), flush=True)


def run(kind: str, workers: int, cores: int | None, manifest: Path, work: Path, env: dict) -> dict:
    out = Path(tempfile.mkdtemp(dir=work)) / "prepared"
    cpus = sorted(os.sched_getaffinity(0))
    pin = (lambda: os.sched_setaffinity(0, cpus[:cores])) if cores else None
    command = [sys.executable, __file__, "--child", kind, "--workers", str(workers), "--manifest", str(manifest)]
    proc = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, env=env, preexec_fn=pin, cwd=ROOT
    )
    shutil.rmtree(out.parent, ignore_errors=True)  # the digests say what it held; at 10x each is ~0.3 GB
    if proc.returncode:
        raise RuntimeError(f"{kind} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rotated_corpus(manifest, copies: int, root: Path) -> None:
    """`copies` copies of every file, ASCII letters rotated by the copy number: same shape, new content."""
    import string

    lower, upper = string.ascii_lowercase, string.ascii_uppercase
    for k in range(copies):
        table = str.maketrans(lower + upper, lower[k:] + lower[:k] + upper[k:] + upper[:k])
        for entry in manifest.entries:
            target = root / f"copy{k}" / entry.name
            target.parent.mkdir(parents=True, exist_ok=True)
            data = Path(entry.path).read_bytes()
            try:
                target.write_text(data.decode("utf-8").translate(table), encoding="utf-8")
            except UnicodeDecodeError:
                target.write_bytes(data)


def conditions() -> str:
    load = os.getloadavg()
    return (
        f"{len(os.sched_getaffinity(0))} cores, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        f"(1/5/15 min) at start"
    )


# kind: (workers, cores it is pinned to)
KINDS = {
    "plain": (1, 1),
    "in-process": (1, 1),
    "dask-1": (1, 1),
    "dask-2": (2, 2),
    "dask-1-warm": (1, 1),
    "dask-2-warm": (2, 2),
    "dask-ext-2": (2, 2),
}
DEFAULT_1X = "plain,in-process,dask-1,dask-2,dask-1-warm,dask-2-warm"
SCALE_ALL = "plain,in-process,dask-1,dask-2"


def plan_of(kinds: str) -> list[tuple[str, int, int]]:
    unknown = [k for k in kinds.split(",") if k not in KINDS]
    if unknown:
        raise SystemExit(f"unknown kinds {unknown}; choose from {', '.join(KINDS)}")
    return [(k, *KINDS[k]) for k in kinds.split(",")]


def measure(plan: list, repeats: int, manifest: Path, work: Path, mb: float, label: str) -> dict[str, list[dict]]:
    """Every kind of `plan` `repeats` times, interleaved; prints each run as it ends."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    runs: dict[str, list[dict]] = {}
    with prefect_test_harness(server_startup_timeout=180):
        env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
        for _ in range(repeats):
            for kind, workers, cores in plan:  # interleaved, so drifting load hits every kind alike
                r = run(kind, workers, cores, manifest, work, env)
                runs.setdefault(kind, []).append(r)
                print(
                    f"  {label} {kind:11s} {r['seconds']:7.2f} s  {mb / r['seconds']:5.2f} MB/s  peak RSS "
                    f"{r['rss_mb']:5.0f} MB ({processes(r)})  "
                    + "  ".join(f"{k} {v:.2f}" for k, v in r["steps"].items()),
                    flush=True,
                )
    return runs


def processes(r: dict) -> str:
    """Peak RSS per process: this one, its largest child, and for an external cluster each process."""
    text = f"self {r['rss_self_mb']:.0f}, children {r['rss_children_mb']:.0f}"
    if "rss_workers_mb" in r:
        workers = "/".join(f"{w:.0f}" for w in r["rss_workers_mb"])
        text += f"; workers {workers}, scheduler {r['rss_scheduler_mb']:.0f}"
    return text


def median_seconds(runs: dict[str, list[dict]], kind: str) -> float:
    return statistics.median(r["seconds"] for r in runs[kind])


def same_output(runs: dict[str, list[dict]], label: str) -> bool:
    """Every run of one corpus made the same documents and the same tokens, byte for byte."""
    outputs = {json.dumps({k: r[k] for k in OUTPUT}, sort_keys=True) for rs in runs.values() for r in rs}
    print(f"{label}: same documents and tokens in every run: {len(outputs) == 1} {sorted(outputs)}", flush=True)
    return len(outputs) == 1


OUTPUT = ("docs_out", "train_tokens", "holdout_tokens", "tokens_sha256")


def figures_1x(runs: dict[str, list[dict]], mb: float) -> list[str]:
    """The headline's 1x figures, for the kinds that ran."""
    t = {kind: median_seconds(runs, kind) for kind in runs}
    parts = [f"plain loop {mb / t['plain']:.2f} MB/s"] if "plain" in t else []
    if "dask-1" in t:
        vs = f" = {t['dask-1'] / t['plain']:.2f}x the plain loop's time (target <= 1.25x)" if "plain" in t else ""
        parts.append(f"dask 1 worker {mb / t['dask-1']:.2f} MB/s{vs}")
    if {"dask-1", "dask-2"} <= t.keys():
        parts.append(f"dask-2 {t['dask-1'] / t['dask-2']:.2f}x faster than dask-1")
    if {"plain", "dask-1-warm", "dask-2-warm"} <= t.keys():
        w1, w2 = t["dask-1-warm"], t["dask-2-warm"]
        parts.append(f"warm cluster: {w1 / t['plain']:.2f}x, {w1 / w2:.2f}x")
    if "in-process" in t:
        parts.append(f"in-process {mb / t['in-process']:.2f} MB/s")
        parts.append(f"peak RSS 1x {max(r['rss_mb'] for r in runs['in-process']):.0f} MB")
    return parts + two_against_one(t, "")


def two_against_one(t: dict[str, float], target: str) -> list[str]:
    """Issue 29's speed-up: 2 workers (a local or an external cluster) against `foundry prepare`'s default."""
    kinds = [k for k in ("dask-2", "dask-ext-2") if k in t and "in-process" in t]
    return [f"{k} vs in-process: 2 workers {t['in-process'] / t[k]:.2f}x faster than 1{target}" for k in kinds]


def figures_scaled(scaled: dict[str, list[dict]], runs: dict[str, list[dict]], mb: float, scale: int) -> list[str]:
    """The headline's figures on the scaled corpus; memory against the same kind at 1x."""
    t = {kind: median_seconds(scaled, kind) for kind in scaled}
    parts = [", ".join(f"{k} {mb / seconds:.2f} MB/s" for k, seconds in t.items())]
    if {"plain", "dask-1"} <= t.keys():
        parts.append(f"dask 1 worker {t['dask-1'] / t['plain']:.2f}x plain")
    if {"dask-1", "dask-2"} <= t.keys():
        parts.append(f"dask-2 {t['dask-1'] / t['dask-2']:.2f}x faster than dask-1")
    parts += two_against_one(t, " (target >= 1.7x)")
    both = [k for k in scaled if k in runs]
    peak = {k: (max(r["rss_mb"] for r in runs[k]), max(r["rss_mb"] for r in scaled[k])) for k in both}
    ratios = ", ".join(f"{k} {big / small:.2f}x ({small:.0f} -> {big:.0f} MB)" for k, (small, big) in peak.items())
    if ratios:
        parts.append(f"peak RSS of the largest process {scale}x/1x: {ratios} (target <= 1.5x)")
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each 1x measurement; the median counts")
    parser.add_argument("--kinds", default=DEFAULT_1X, help=f"kinds to run at 1x, of {', '.join(KINDS)}")
    parser.add_argument("--scale", type=int, default=10, help="copies of the corpus for the scaled runs")
    parser.add_argument("--no-scale", action="store_true", help="skip the scaled corpus")
    parser.add_argument("--scaled-kinds", help="kinds to run on the scaled corpus (default: in-process)")
    parser.add_argument("--scale-all", action="store_true", help=f"the same as --scaled-kinds {SCALE_ALL}")
    parser.add_argument("--scale-repeats", type=int, default=3, help="runs of each scaled measurement; the median")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--manifest", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.workers, args.manifest, args.out)
    if args.scale_all and args.scaled_kinds:
        parser.error("--scale-all and --scaled-kinds both choose the scaled kinds: give one")
    plan, scaled_plan = plan_of(args.kinds), plan_of(SCALE_ALL if args.scale_all else args.scaled_kinds or "in-process")

    work = Path(tempfile.mkdtemp(prefix="bench-data-prep-"))
    os.environ["FOUNDRY_HOME"] = str(work / "home")
    from foundry.runtime.env import configure_environment

    configure_environment()
    from foundry.config import load_config
    from foundry.data.acquire import acquire_source

    print(conditions(), flush=True)
    manifest_path = work / "source_manifest.json"
    manifest = acquire_source(load_config(None, []).data, manifest_path)
    mb = manifest.bytes / 1e6
    print(f"corpus: stdlib:// of Python {sys.version.split()[0]}, {manifest.files} files, {mb:.2f} MB", flush=True)
    runs = measure(plan, args.repeats, manifest_path, work, mb, "1x")
    same = same_output(runs, "1x")
    headline = f"data_prep (median of {args.repeats}): " + "; ".join(figures_1x(runs, mb))
    if not args.no_scale:
        big = work / "scaled"
        rotated_corpus(manifest, args.scale, big)
        scaled_manifest = acquire_source(load_config(None, [f"data.source={big}"]).data, work / "scaled_manifest.json")
        big_mb = scaled_manifest.bytes / 1e6
        print(f"{args.scale}x corpus: {scaled_manifest.files} files, {big_mb:.0f} MB", flush=True)
        scaled = measure(scaled_plan, args.scale_repeats, work / "scaled_manifest.json", work, big_mb, f"{args.scale}x")
        same &= same_output(scaled, f"{args.scale}x")
        headline += f"; at {args.scale}x (median of {args.scale_repeats}): "
        headline += "; ".join(figures_scaled(scaled, runs, big_mb, args.scale))
    print(conditions().replace("at start", "at end"))
    print(headline if same else "data_prep: runs disagree on documents or tokens; no figures (see above)")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
