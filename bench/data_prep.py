"""Data preparation throughput: Prefect tasks on Dask (1 and 2 workers) against a plain single-core loop.

    python bench/data_prep.py [--repeats 3] [--scale 10 | --no-scale] [--scale-all] [--scale-repeats 3]

All runs prepare the default corpus (`stdlib://`, the same acquired files) with the default config:
- plain: the same steps done by the libraries, called directly in one loop, holding the corpus in
  lists (read, decode, normalise, scrub, quality rules, sha256, datasketch MinHash and LSH, the
  byte-guaranteed holdout, tokenizers BPE training on the same content-hash sample of at most
  `tokenizer.max_train_bytes` of the train split, encoding, numpy token files);
- in-process: `run_prepare` with `data.workers: 1` (the default: no cluster);
- dask-1 / dask-2: `run_prepare` with `data.scheduler: local`, `data.workers: 1|2`: a Prefect flow whose
  partition steps are task runs on a Dask LocalCluster (against a Prefect server started beforehand,
  as in the pipeline), cluster start and shutdown included.
Each run is a fresh process pinned with sched_setaffinity to as many cores as it has workers (the
plain loop and in-process: one), tokenizer threads included; Dask workers inherit the pinning.
Imports happen before the clock starts. Peak RSS is the largest of the process and its children.
Every run reports the sha256 of its train and holdout token streams: all runs of one corpus must
agree (same documents, same tokens), or the benchmark says so and exits 1. Each kind runs `--repeats`
times, interleaved with the others so drifting load hits them alike, and the median counts.
`--scale N` also prepares N copies of the corpus (letters rotated per copy, so no copy is a duplicate
of another) in-process, `--scale-repeats` times, to show how time and peak memory follow the corpus
size; `--scale-all` runs plain, dask-1 and dask-2 on it too (tens of minutes on 2 cores), where the
cluster's fixed cost weighs less. The last line is the headline.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def plain_loop(entries: list, config, out: Path) -> dict:
    """Every step of preparation, by the underlying libraries, in one loop over an in-memory corpus."""
    import hashlib
    import zlib

    import numpy as np
    from datasketch import MinHash, MinHashLSH
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from foundry.data import pii
    from foundry.data.clean import holdout_set, normalise
    from foundry.data.dedup import shingles
    from foundry.data.quality import quality_problem

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
    import foundry.data.prepare as prep

    def wrap(name, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timings[name] = timings.get(name, 0.0) + time.perf_counter() - start

        return timed

    prep.select_documents = wrap("dedup+split", prep.select_documents)
    prep.train_tokenizer = wrap("train tokenizer", prep.train_tokenizer)
    prep.assemble_shards = wrap("shards", prep.assemble_shards)
    original = prep.prepare

    def prepare(*args, mapper=prep.serial_map, **kwargs):
        calls = iter(("clean (map)", "encode (map)"))
        return original(*args, mapper=wrap_map(mapper, calls), **kwargs)

    def wrap_map(mapper, calls):
        return lambda step, jobs: wrap(next(calls), mapper)(step, jobs)

    prep.prepare = prepare
    if dask:  # the flow calls prepare through its module's attribute
        import tasks.data_parallel

        tasks.data_parallel.prepare = prepare


def _warm_cluster(workers: int):
    """A running LocalCluster whose workers have already run a small preparation (imports done)."""
    from distributed import LocalCluster

    from foundry.config import load_config
    from foundry.data.acquire import acquire_source
    from tasks.data_parallel import WORKER_ENV, environment_kept, run_prepare

    with environment_kept():
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            env=WORKER_ENV,
        )
    overrides = ["data.source=stdlib://json", f"data.scheduler={cluster.scheduler_address}", "model.block_size=8"]
    config = load_config(None, [*overrides, f"data.workers={workers}"])
    warm = Path(tempfile.mkdtemp())
    run_prepare(acquire_source(config.data, warm / "m.json"), config, warm / "prepared", progress=False)
    return cluster


def child(kind: str, workers: int, manifest_path: Path, out: Path) -> None:
    """One measurement, in this (pinned) process; prints a JSON line."""
    os.environ.setdefault("FOUNDRY_HOME", str(out.parent / "home"))
    from foundry.env import configure_environment

    configure_environment()
    from foundry.config import load_config
    from foundry.contracts import SourceManifest

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
    else:
        from tasks.data_parallel import run_prepare

        overrides = [] if kind == "in-process" else ["data.scheduler=local", f"data.workers={workers}"]
        if kind.endswith("warm"):  # an existing cluster, started and warmed before the clock
            cluster = _warm_cluster(workers)
            overrides[0] = f"data.scheduler={cluster.scheduler_address}"
        config = load_config(None, overrides)
        if kind != "in-process":
            import distributed  # noqa: E401,F401

        _timed_steps(timings, dask=kind != "in-process")
        start = time.perf_counter()
        m = run_prepare(manifest, config, out, progress=False).manifest
        seconds = time.perf_counter() - start
        result = {
            "docs_out": m.count("docs_out"),
            "train_tokens": m.train_tokens,
            "holdout_tokens": m.holdout_tokens,
            "tokens_sha256": {
                split: stream_digest([out / s.file for s in m.shards if s.split == split])
                for split in ("train", "holdout")
            },
        }
    rss = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    )
    print(json.dumps({"seconds": seconds, "rss_mb": rss / 1024, "steps": timings, **result}), flush=True)
    if kind.endswith("warm"):
        cluster.close()


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


PLAN = [("plain", 1, 1), ("in-process", 1, 1), ("dask-1", 1, 1), ("dask-2", 2, 2)]
WARM = [("dask-1-warm", 1, 1), ("dask-2-warm", 2, 2)]


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
                    f"{r['rss_mb']:5.0f} MB  " + "  ".join(f"{k} {v:.2f}" for k, v in r["steps"].items()),
                    flush=True,
                )
    return runs


def median_seconds(runs: dict[str, list[dict]], kind: str) -> float:
    return statistics.median(r["seconds"] for r in runs[kind])


def same_output(runs: dict[str, list[dict]], label: str) -> bool:
    """Every run of one corpus made the same documents and the same tokens, byte for byte."""
    outputs = {json.dumps({k: r[k] for k in OUTPUT}, sort_keys=True) for rs in runs.values() for r in rs}
    print(f"{label}: same documents and tokens in every run: {len(outputs) == 1} {sorted(outputs)}", flush=True)
    return len(outputs) == 1


OUTPUT = ("docs_out", "train_tokens", "holdout_tokens", "tokens_sha256")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each 1x measurement; the median counts")
    parser.add_argument("--scale", type=int, default=10, help="copies of the corpus for the scaled runs")
    parser.add_argument("--no-scale", action="store_true", help="skip the scaled corpus")
    parser.add_argument("--scale-all", action="store_true", help="on the scaled corpus, also plain, dask-1 and dask-2")
    parser.add_argument("--scale-repeats", type=int, default=3, help="runs of each scaled measurement; the median")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--manifest", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.workers, args.manifest, args.out)

    work = Path(tempfile.mkdtemp(prefix="bench-data-prep-"))
    os.environ["FOUNDRY_HOME"] = str(work / "home")
    from foundry.env import configure_environment

    configure_environment()
    from foundry.config import load_config
    from foundry.data.acquire import acquire_source

    print(conditions(), flush=True)
    manifest_path = work / "source_manifest.json"
    manifest = acquire_source(load_config(None, []).data, manifest_path)
    mb = manifest.bytes / 1e6
    print(f"corpus: stdlib:// of Python {sys.version.split()[0]}, {manifest.files} files, {mb:.2f} MB", flush=True)
    runs = measure(PLAN + WARM, args.repeats, manifest_path, work, mb, "1x")
    same = same_output(runs, "1x")
    plain, one, two = (median_seconds(runs, k) for k in ("plain", "dask-1", "dask-2"))
    w1, w2 = median_seconds(runs, "dask-1-warm"), median_seconds(runs, "dask-2-warm")
    headline = (
        f"data_prep (median of {args.repeats}): plain loop {mb / plain:.2f} MB/s; dask 1 worker {mb / one:.2f} MB/s "
        f"= {one / plain:.2f}x the plain loop's time (target <= 1.25x); 2 workers {one / two:.2f}x faster than 1 "
        f"(target >= 1.7x); warm cluster: {w1 / plain:.2f}x, {w1 / w2:.2f}x; in-process "
        f"{mb / median_seconds(runs, 'in-process'):.2f} MB/s; peak RSS 1x {max(r['rss_mb'] for r in runs['in-process']):.0f} MB"
    )
    if not args.no_scale:
        big = work / "scaled"
        rotated_corpus(manifest, args.scale, big)
        scaled_manifest = acquire_source(load_config(None, [f"data.source={big}"]).data, work / "scaled_manifest.json")
        big_mb = scaled_manifest.bytes / 1e6
        print(f"{args.scale}x corpus: {scaled_manifest.files} files, {big_mb:.0f} MB", flush=True)
        plan = PLAN if args.scale_all else [("in-process", 1, 1)]
        scaled = measure(plan, args.scale_repeats, work / "scaled_manifest.json", work, big_mb, f"{args.scale}x")
        same &= same_output(scaled, f"{args.scale}x")
        rss = max(r["rss_mb"] for r in scaled["in-process"])
        headline += f", {args.scale}x {rss:.0f} MB; at {args.scale}x (median of {args.scale_repeats}): in-process "
        headline += f"{big_mb / median_seconds(scaled, 'in-process'):.2f} MB/s"
        if args.scale_all:
            sp, s1, s2 = (median_seconds(scaled, k) for k in ("plain", "dask-1", "dask-2"))
            headline += f", dask 1 worker {s1 / sp:.2f}x plain, 2 workers {s1 / s2:.2f}x faster than 1"
    print(conditions().replace("at start", "at end"))
    print(headline if same else "data_prep: runs disagree on documents or tokens; no figures (see above)")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
