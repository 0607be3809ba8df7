"""The image path at 10x the images: time and memory per process against the default set (issue #59, point 3).

    python bench/vision_scale.py [--images 5000] [--scale 10] [--steps 100] [--repeats 1]

The default set is bench/vision.py's larger one: `--images` deterministic 64x64 RGB PNGs in 10 class folders
(`vision.synthetic_source`); the scaled set is `--scale` times as many, made the same way (the first `--images` are
the default set's). Each measure runs in a fresh process, at each size, the sizes alternating (ABBA over
`--repeats`), with `configs/vision.yaml` at 64x64 RGB and its package defaults (2 image workers, 2 loader workers):
1. prepare: `foundry.vision.stage.prepare_image_dataset` from the source folder (read, fingerprint, decode, fit,
   dHash, encode in the image workers; de-duplication, the split, shards, digests);
2. hydrate: `foundry.data.hydrate.hydrate_version` of that dataset, versioned into a fresh home's DVC remote
   beforehand (not timed), into a fresh node home;
3. loading: one epoch of the trainer's `ShardBatches` over the hydrated training shards (its loader processes);
4. training: `--steps` steps of `foundry.training.trainer.train` on the hydrated dataset (validation and checkpoints
   between steps off), the same steps at both sizes.
Each process reports its wall time and the peak resident memory of itself and of its largest child process (the
image workers, the loader processes): memory per process is the larger. The last line is the headline: each
measure's time and memory per process at `--scale`x against 1x (medians), beside the targets (time at most the
scale, memory per process at most 1.5x).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MEASURES = ("prepare", "hydrate", "loading", "training")


def config_for(source: Path, *extra: str):
    from foundry.config import load_config

    sets = [f"data.source={source}", "image.size=64", "image.channels=rgb", *extra]
    return load_config(REPO / "configs" / "vision.yaml", sets)


def prepare(folder: Path, steps: int) -> dict:
    from foundry.core.preparing import Preparing
    from foundry.vision import stage
    from foundry.vision.shards import ShardManifest

    config = config_for(folder / "source")
    source = stage.acquire_images(config, folder / "source.json")
    start = time.perf_counter()
    stage.prepare_image_dataset(Preparing(source, config, folder / "prepared"))
    seconds = time.perf_counter() - start
    kept = ShardManifest.read(folder / "prepared")
    return {"seconds": seconds, "images": source.files, "kept": kept.images("train") + kept.images("holdout")}


def hydrate(folder: Path, steps: int) -> dict:
    from foundry.core.contracts import SourceManifest
    from foundry.data.hydrate import hydrate_version
    from foundry.data.versioning import version_dataset

    config = config_for(folder / "source")
    staged = folder / "staged"
    shutil.copytree(folder / "prepared", staged)  # versioning moves it into the workspace
    with contextlib.redirect_stdout(io.StringIO()):  # DVC's "Initialized DVC repository" and lock-file lines
        data = version_dataset(config, staged, SourceManifest.read(folder / "source.json"), folder / "home")
        shutil.rmtree(folder / "node", ignore_errors=True)
        start = time.perf_counter()
        hydrated = hydrate_version(data, folder / "node")
        seconds = time.perf_counter() - start
    (folder / "hydrated.txt").write_text(str(hydrated))
    return {"seconds": seconds}


def loading(folder: Path, steps: int) -> dict:
    from foundry.vision.training import ShardBatches

    config = config_for(folder / "source")
    t, workers = config.train, config.image.loader_workers
    batches = ShardBatches(Path((folder / "hydrated.txt").read_text()), t.batch_size, t.seed, workers=workers)
    start, images = time.perf_counter(), 0
    for pixels, _labels in batches:
        images += len(pixels)
    return {"seconds": time.perf_counter() - start, "images": images}


def training(folder: Path, steps: int) -> dict:
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    overrides = [f"train.max_steps={steps}", "train.val_every_n_steps=1000000", "checkpoint.every_n_steps=1000000"]
    config = config_for(folder / "source", *overrides)
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    start = time.perf_counter()
    train(config, TrainingRun(Path((folder / "hydrated.txt").read_text()), folder / "checkpoints"), progress=False)
    return {"seconds": time.perf_counter() - start, "images": steps * config.train.batch_size}


def child(measure: str, folder: Path, steps: int) -> None:
    os.environ["FOUNDRY_HOME"] = str(folder / "home")
    from foundry.runtime.env import configure_environment

    configure_environment()
    result = globals()[measure](folder, steps)
    kib_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kib_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child's
    print(json.dumps({**result, "rss_mb": max(kib_self, kib_children) / 1024, "self_mb": kib_self / 1024}))


def run(measure: str, folder: Path, steps: int) -> dict:
    command = [sys.executable, __file__, "--child", measure, "--folder", str(folder), "--steps", str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        raise SystemExit(f"{measure} in {folder} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def sources(work: Path, images: int, scale: int) -> dict[str, Path]:
    """The default set and the scaled one, each a folder with its `source` of PNGs."""
    sys.path.insert(0, str(REPO / "bench"))
    import vision

    shutil.rmtree(vision.WORK, ignore_errors=True)  # made on its import; nothing of it is used here

    folders = {"1x": work / "1x", f"{scale}x": work / f"{scale}x"}
    for folder, count in zip(folders.values(), (images, images * scale)):
        start = time.perf_counter()
        vision.synthetic_source(folder / "source", count)
        print(f"{count:,} 64x64 RGB PNGs written in {time.perf_counter() - start:.1f} s", flush=True)
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=5000, help="PNGs in the default set")
    parser.add_argument("--scale", type=int, default=10, help="times as many in the scaled set")
    parser.add_argument("--steps", type=int, default=100, help="training steps at each size")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each measure at each size, alternating")
    parser.add_argument("--child", choices=MEASURES, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.folder, args.steps)
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="bench-vision-scale-"))
    try:
        load = os.getloadavg()
        print(f"{len(os.sched_getaffinity(0))} cores, load average {load[0]:.2f} at start; work folder {work}")
        folders = sources(work, args.images, args.scale)
        results: dict[str, dict[str, list[dict]]] = {m: {size: [] for size in folders} for m in MEASURES}
        for i in range(args.repeats):
            order = list(folders) if i % 2 == 0 else list(folders)[::-1]
            for measure in MEASURES:  # each measure needs the one before it, at the same size
                for size in order:
                    got = run(measure, folders[size], args.steps)
                    results[measure][size].append(got)
                    rate = f", {got['images'] / got['seconds']:,.0f} images/s" if "images" in got else ""
                    print(
                        f"{measure} {size}: {got['seconds']:.2f} s{rate}, peak RSS per process {got['rss_mb']:.0f} MB "
                        f"(the measuring process {got['self_mb']:.0f} MB)",
                        flush=True,
                    )
        big = f"{args.scale}x"
        figures = []
        for measure in MEASURES:
            seconds = {s: statistics.median(r["seconds"] for r in results[measure][s]) for s in folders}
            rss = {s: statistics.median(r["rss_mb"] for r in results[measure][s]) for s in folders}
            figures.append(
                f"{measure} time {seconds[big] / seconds['1x']:.2f}x, memory {rss[big] / rss['1x']:.2f}x "
                f"({rss['1x']:.0f} -> {rss[big]:.0f} MB)"
            )
        print(f"load average {os.getloadavg()[0]:.2f} at end")
        print(
            f"vision_scale, {args.scale * args.images:,} images against {args.images:,} (targets: time <= "
            f"{args.scale}x, memory per process <= 1.5x): " + "; ".join(figures)
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
