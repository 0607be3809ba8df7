"""The current defaults against a candidate config (a search's best.yaml), trained side by side in one run.

    python bench/defaults.py --candidate best.yaml [--baseline params.yaml] [--order AB|ABBA] [--set k=v ...]

Both configs go through what `make run` does to train and score a model, on the same machine in the same
run: the corpus acquired and prepared by the pipeline's own code (once per tokenizer: the holdout
documents are the same whatever the tokenizer), trained with `foundry.training.trainer.train` at the
config's own settings (all of this process's cores, as `foundry run`) in a fresh process each, with an empty compile
cache (as `foundry run`'s training child on a fresh home), scored with the pipeline's holdout
metrics. Validation, DVC versioning and registration are left out: they are the same for both. Training
times vary by a third between runs on a shared machine, so only their ratio within this run is the
figure; `--order ABBA` trains each twice, in mirrored order, and compares the means. `--set` applies to
both configs (e.g. `--set data.source=stdlib://email --set train.max_steps=20` for a quick check).
The last line is the headline: both holdout bits per byte, xz's on the same holdout, and the ratio of
training times (candidate / baseline; the issue's bar: <= 1.0 and candidate <= 1.62).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if "FOUNDRY_HOME" not in os.environ:  # a throwaway home (MLflow store, data, checkpoints), removed at exit
    os.environ["FOUNDRY_HOME"] = tempfile.mkdtemp(prefix="foundry-bench-")
    atexit.register(shutil.rmtree, os.environ["FOUNDRY_HOME"], True)

from foundry.runtime.env import configure_environment  # noqa: E402

configure_environment()  # before the libraries load


def prepared(config, work: Path, cache: dict) -> Path:
    """The corpus prepared with this config's data and tokenizer settings, once per distinct setting."""
    from foundry.core.preparing import Preparing
    from foundry.data.acquire import acquire_source
    from foundry.pretrain.prepare import prepare

    key = config.data.model_dump_json() + config.tokenizer.model_dump_json()  # what prepare() reads
    if key not in cache:
        folder = work / f"data-{len(cache)}"
        manifest = acquire_source(config.data, folder / "source_manifest.json")
        prepare(Preparing(manifest, config, folder / "prepared"))
        cache[key] = folder / "prepared"
    return cache[key]


def timed_training(config, data_dir: Path, checkpoints: Path) -> tuple[Path, float]:
    """Train in this (fresh) process with its own, empty compile cache, as `foundry run`'s training child on a
    fresh home does; (model.pt, seconds)."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(checkpoints / "torchinductor")
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    start = time.perf_counter()
    model_pt = train(config, TrainingRun(data_dir, checkpoints), progress=False)
    return model_pt, time.perf_counter() - start


def trained_tokens(t, block_size: int) -> int:
    """Tokens one process trains on, a batch ramp's smaller batches counted as they are."""
    from models.data import ramp_rows

    rows = sum(ramp_rows(step, t.batch_size, t.ramp_steps, t.batch_ramp_rows) for step in range(t.max_steps))
    return rows * t.grad_accum_steps * block_size


def train_and_score(name: str, config, data_dir: Path, work: Path, attempt: int) -> dict:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from foundry.data.manifest import DatasetManifest
    from foundry.pretrain.holdout_metrics import holdout_metrics, holdout_tokens, score
    from models.gpt import load_gpt

    # A process per training: nothing compiled or cached by an earlier training in this run helps a later one;
    # and no checkpoint of an earlier run in this home is resumed or competes with the new ones for keeping.
    checkpoints = work / f"{name}-{attempt}"
    shutil.rmtree(checkpoints, ignore_errors=True)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        model_pt, seconds = child.submit(timed_training, config, data_dir, checkpoints).result()
    e, model = config.evaluation, load_gpt(model_pt)
    metrics = holdout_metrics(
        model, data_dir / "tokenizer.json", data_dir, e.batch_size, e.max_tokens, e.window_overlap
    )
    # Figures from before 2026-12-04 were scored in windows that do not overlap: that score too, to compare.
    apart = metrics.bits_per_byte
    if e.window_overlap:  # the model's score alone again, not the unigram baseline's pass over the train split
        holdout = holdout_tokens(data_dir, data_dir / "tokenizer.json")
        holdout_bytes = DatasetManifest.read(data_dir).holdout_bytes
        apart = score(model, holdout, holdout_bytes, e.batch_size, e.max_tokens, 0.0)["bits_per_byte"]
    tokens = trained_tokens(config.train, config.model.block_size)
    print(
        f"{name:9s} try {attempt}: {seconds:7.1f} s training, {tokens / seconds:7.0f} tokens/s, "
        f"holdout {metrics.bits_per_byte:.4f} bits per byte ({apart:.4f} in windows apart)",
        flush=True,
    )
    return {"seconds": seconds, "bits_per_byte": metrics.bits_per_byte}


def warm_up(config, data_dir: Path, work: Path) -> None:
    """Two steps in a child: what only the first training would pay (the CPU's peak FLOP/s, measured once per home
    for MFU; the data in the page cache) is paid here rather than by whichever config trains first."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    short = config.model_copy(deep=True)
    short.train.max_steps = 2
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        child.submit(timed_training, short, data_dir, work / "warm-up").result()


def against(results: dict[str, dict], base: str) -> str:
    """Each result's bits per byte and training time against `base`'s, for a headline."""
    b = results[base]
    return "; ".join(
        f"{name} {r['bits_per_byte']:.4f} bits/byte ({r['bits_per_byte'] - b['bits_per_byte']:+.4f}), "
        f"{r['seconds'] / b['seconds']:.2f}x time"
        for name, r in results.items()
    )


def differences(baseline, candidate) -> list[str]:
    a, b = baseline.flat(), candidate.flat()
    return [f"{k}: {a[k]} -> {b[k]}" for k in a if a[k] != b[k] and not k.startswith("search.")]


def main() -> int:
    from foundry.config import load_config
    from foundry.pretrain.holdout_metrics import compression_bits_per_byte

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--candidate", type=Path, required=True, help="the config to compare (e.g. a search's best.yaml)"
    )
    parser.add_argument("--baseline", type=Path, default=Path("params.yaml"), help="the current defaults")
    parser.add_argument("--order", choices=["AB", "ABBA"], default="AB", help="training order (A: baseline)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--work", type=Path, help="folder for data and checkpoints (default: a temporary one)")
    args = parser.parse_args()

    configs = {
        name: load_config(path, args.overrides)
        for name, path in (("baseline", args.baseline), ("candidate", args.candidate))
    }
    work = args.work or Path(os.environ["FOUNDRY_HOME"]) / "bench-defaults"
    print("candidate differs in:", *differences(configs["baseline"], configs["candidate"]) or ["nothing"], sep="\n  ")
    cache: dict = {}
    data = {name: prepared(config, work, cache) for name, config in configs.items()}
    warm_up(configs["baseline"], data["baseline"], work)
    results: dict[str, list[dict]] = {"baseline": [], "candidate": []}
    for attempt, name in enumerate(("baseline", "candidate", "candidate", "baseline")[: len(args.order)]):
        results[name].append(train_and_score(name, configs[name], data[name], work, attempt))

    seconds = {name: sum(r["seconds"] for r in runs) / len(runs) for name, runs in results.items()}
    bpb = {name: sum(r["bits_per_byte"] for r in runs) / len(runs) for name, runs in results.items()}
    xz = compression_bits_per_byte(data["baseline"], configs["baseline"].evaluation.compression_context_bytes)[
        "xz_bits_per_byte"
    ]
    ratio = seconds["candidate"] / seconds["baseline"]
    print(
        f"defaults: baseline {bpb['baseline']:.4f} bits/byte, candidate {bpb['candidate']:.4f} "
        f"({bpb['candidate'] / bpb['baseline']:.3f}x), xz {xz:.4f}; "
        f"training time candidate/baseline {ratio:.2f}x ({seconds['candidate']:.0f} s / {seconds['baseline']:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
