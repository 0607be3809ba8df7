"""The vision workload against plain baselines in the same run: data preparation, loading, training, hydration,
and the default run's holdout accuracy beside its baselines.

    nice -n 19 python bench/vision.py [--synthetic 5000] [--steps 200] [--repeats 2] [--workers 2] [--no-accuracy]
        [--decoded-cache-mb N]

Datasets: `configs/vision.yaml`'s sklearn digits (1,797 8x8 gray), and for preparation, loading and hydration also
`--synthetic` deterministic 64x64 RGB PNGs (smooth colour fields with noise, 10 class folders) written to a temp
folder. Ratios are Foundry's throughput over the baseline's (above 1: Foundry faster); each figure is the median
of `--repeats` runs of each side (at least SHORT_REPEATS for the digits' prepare and the hydrations, which take
under a second), the sides alternating (ABBA...), so load from other work hits both alike. Each side's output is
removed after its timed run, outside the clock, so that neither leaves the next run more dirty pages to write back;
only the last Foundry one is kept, for the measures after it.
1. prepare: `foundry.vision.stage.prepare_image_dataset` (the pipeline's call: list the sources again, then in
   image.workers processes read, fingerprint, decode, count and strip metadata, fit, dHash and encode each image,
   its PNG spooled; exact/near de-duplication, split on the ledger, table, audit and ledger, then `write_shards`
   from the spools and the manifest with every file's digests) against
   plain: one Pillow loop that opens each file, converts it to L/RGB, resizes it to image.size (bicubic), hashes
   the pixels with sha256, drops exact repeats, and writes a PNG (compress_level 6, as Foundry's) per image.
2. loading: whole epochs (at least 8,000 images a measure) of the trainer's own loader
   (`foundry.vision.training.ShardBatches`: tar shards, shuffle buffer, Pillow decode, in `--workers` DataLoader
   processes as image.loader_workers, keeping no decoded image: every epoch decoded, as the plain loader does)
   against a `torch.utils.data.DataLoader` over the same train PNGs as plain files (shuffled, Pillow decode,
   `--workers` persistent workers), both batch train.batch_size.
3. training (digits): `--steps` steps of `foundry.training.trainer.train` on the hydrated version (no MLflow
   run; validation and checkpoints between steps off; the final checkpoint and model.pt written) against a plain
   loop: the same `models.vision` classifier, augmentation, fused AdamW, schedule, clipping, batch size and thread
   count, batches from the plain DataLoader of (2), both sides with `--workers` loader processes; ours keep
   image.decoded_cache_mb of decoded images (`--decoded-cache-mb`; 0: decode every epoch, as the plain loader
   does), which holds all of the digits. The two alternate step by step in one process (a callback
   runs a plain step after each of ours from step 10 on, as bench/train_overhead.py does), so load from other
   work hits both alike. Data wait: each side's time in its loader's `next()` (ours: `ShardBatches`' iterator
   wrapped in this process). Also printed: ours from the end of the plain step to our step's start (the loader
   and Lightning's loop between steps, as `LitVision`'s train/data_wait_ms counts it).
4. hydration: `foundry.data.hydrate.hydrate_version` into a fresh home from the local DVC remote against `cp -r`
   of that remote folder (it holds this version only).
5. accuracy: the default config (its own steps) trained on the hydrated digits and scored by
   `foundry.vision.evaluate.evaluate_images`, as `foundry run --config configs/vision.yaml` does.
The last line is the headline.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
WORK = Path(tempfile.mkdtemp(prefix="bench-vision-"))
os.environ["FOUNDRY_HOME"] = str(WORK / "home")

from foundry.runtime.env import configure_environment  # noqa: E402

configure_environment()  # before the libraries load

from foundry.config import load_config  # noqa: E402
from foundry.core.preparing import Preparing  # noqa: E402
from foundry.data.hydrate import hydrate_version  # noqa: E402
from foundry.data.versioning import version_dataset  # noqa: E402
from foundry.vision import stage  # noqa: E402
from foundry.vision.acquire import listing  # noqa: E402
from foundry.vision.shards import ShardManifest  # noqa: E402

LOAD_IMAGES = 8000  # read by each loader per measure: an epoch of the digits is a fraction of a second
# Runs of each side, at least, for the measures that take under a second (the digits' prepare, both hydrations): with
# two, the median is the mean, and one slow run of a 20 ms copy moved the ratio from 0.99x to 0.31x (bench/README.md).
SHORT_REPEATS = 8
SKIP = 10  # steps left out of the training figures: allocator and Lightning warm-up


def alternating(repeats: int, sides: dict) -> dict[str, list[float]]:
    """Run each side `repeats` times in ABBA order; each returns seconds."""
    names, times = list(sides), {name: [] for name in sides}
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            times[name].append(sides[name](i))
    return times


def synthetic_source(root: Path, n: int) -> Path:
    """`n` 64x64 RGB PNGs in 10 class folders: an 8x8 grid of random colours upsampled, with noise."""
    rng = np.random.default_rng(0)
    for i in range(n):
        coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
        pixels = np.clip(coarse.astype(int) + rng.integers(-8, 9, (64, 64, 3)), 0, 255).astype(np.uint8)
        path = root / str(i % 10) / f"{i:05d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path, format="PNG")
    return root


def plain_prepare(images: list[tuple[Path, str]], size: int, mode: str, out: Path) -> int:
    """The baseline: decode, convert, resize, hash, drop exact repeats, PNG per image. Images kept."""
    seen = set()
    for path, label in images:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert(mode).resize((size, size), Image.Resampling.BICUBIC))
        sha = hashlib.sha256(pixels.tobytes()).hexdigest()
        if sha in seen:
            continue
        seen.add(sha)
        target = out / label / f"{sha}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG", compress_level=6)
        target.write_bytes(buffer.getvalue())
    return len(seen)


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def prepare_side(config, name: str, repeats: int) -> dict:
    """Both preparations of one dataset; the last Foundry folder is versioned and hydrated afterwards."""
    source = stage.acquire_images(config, WORK / f"{name}-source.json")
    with listing(config.data, config.image) as found:
        images = [(one.path, one.label) for one in found.images]
    mode = "L" if config.image.channels == "gray" else "RGB"
    out = {}

    def foundry(i: int) -> float:
        out["prepared"] = WORK / f"{name}-prepared-{i}"
        seconds = timed(stage.prepare_image_dataset, Preparing(source, config, out["prepared"]))
        if i < repeats - 1:  # the last is versioned and hydrated afterwards
            shutil.rmtree(out["prepared"])
        return seconds

    def plain(i: int) -> float:
        kept = WORK / f"{name}-plain-{i}"
        seconds = timed(plain_prepare, images, config.image.size, mode, kept)
        shutil.rmtree(kept)
        return seconds

    times = alternating(repeats, {"foundry": foundry, "plain": plain})
    manifest = ShardManifest.read(out["prepared"])
    print(
        f"{name} prepare: {len(images)} images in, {manifest.images('train')} train + {manifest.images('holdout')} "
        f"holdout kept; foundry {len(images) / statistics.median(times['foundry']):,.0f} images/s, "
        f"plain {len(images) / statistics.median(times['plain']):,.0f} images/s"
    )
    return {"source": source, "folder": out["prepared"], "images": len(images), "times": times}


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def hydrate_side(config, name: str, prepared: dict, repeats: int) -> tuple[Path, dict]:
    home = WORK / f"{name}-home"
    with contextlib.redirect_stdout(io.StringIO()):  # DVC's "Initialized DVC repository" and lock-file lines
        data = version_dataset(config, prepared["folder"], prepared["source"], home)
    remote = Path(data.remote)

    def cp(i: int) -> float:
        seconds = timed(subprocess.run, ["cp", "-r", str(remote), str(WORK / f"{name}-cp-{i}")])
        shutil.rmtree(WORK / f"{name}-cp-{i}")
        return seconds

    def hydrate(i: int) -> float:
        with contextlib.redirect_stdout(io.StringIO()):
            seconds = timed(hydrate_version, data, WORK / f"{name}-node-{i}")
        shutil.rmtree(WORK / f"{name}-node-{i}")
        return seconds

    times = alternating(repeats, {"hydrate": hydrate, "cp": cp})
    mib = folder_bytes(remote) / 2**20
    print(
        f"{name} hydrate: version {data.data_version[:12]}, {mib:.1f} MiB; hydrate_version "
        f"{statistics.median(times['hydrate']):.3f} s, cp -r {statistics.median(times['cp']):.3f} s"
    )
    with contextlib.redirect_stdout(io.StringIO()):
        return hydrate_version(data, WORK / f"{name}-node"), times


def plain_files(data_dir: Path, out: Path) -> list[tuple[Path, int]]:
    """The train shards' PNGs as plain files (the same bytes), with their class indices."""
    files = []
    for shard in ShardManifest.read(data_dir).shards_of("train"):
        with tarfile.open(data_dir / shard.file) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar}
        for key in sorted({n.rsplit(".", 1)[0] for n in members}):
            path = out / f"{key}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(members[f"{key}.png"])
            files.append((path, int(members[f"{key}.cls"])))
    return files


class PlainImages(torch.utils.data.Dataset):
    def __init__(self, files: list[tuple[Path, int]]):
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        path, label = self.files[i]
        with Image.open(path) as image:
            array = np.array(image)
        array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
        return torch.from_numpy(np.ascontiguousarray(array)), label


def plain_loader(files, batch_size: int, seed: int, workers: int):
    generator = torch.Generator().manual_seed(seed)
    return torch.utils.data.DataLoader(
        PlainImages(files),
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        generator=generator,
    )


def loading_side(config, name: str, data_dir: Path, files, repeats: int) -> dict:
    """Images/s of each loader over whole epochs, at least LOAD_IMAGES images a measure."""
    from foundry.vision.training import ShardBatches

    t = config.train
    workers = config.image.loader_workers
    batches = {
        "foundry": ShardBatches(data_dir, t.batch_size, t.seed, workers=workers),
        "plain": plain_loader(files, t.batch_size, 0, workers),
    }
    epochs, count = math.ceil(LOAD_IMAGES / len(files)), {}

    def passes(which: str):
        def run(_i: int) -> float:
            start, count[which] = time.perf_counter(), 0
            for _ in range(epochs):
                for images, _labels in batches[which]:
                    count[which] += len(images)
            return time.perf_counter() - start

        return run

    times = alternating(repeats, {"foundry": passes("foundry"), "plain": passes("plain")})
    rates = {k: count[k] / statistics.median(v) for k, v in times.items()}
    print(
        f"{name} loading ({epochs} epochs of {len(files)} train images, batch {t.batch_size}, {workers} workers): "
        f"foundry {rates['foundry']:,.0f} images/s, plain {rates['plain']:,.0f} images/s"
    )
    return rates


class PlainLoop:
    """The plain training loop, one step at a time: the same classifier, augmentation, optimizer, schedule,
    clipping and batch size as Foundry's, batches from a DataLoader over plain PNG files."""

    def __init__(self, config, data_dir: Path, files):
        from foundry.vision.training import augment_args, vision_model_args
        from models.lit_base import adamw, warmup_cosine
        from models.vision import AugmentConfig, ImageClassifier, VisionConfig

        t = self.train = config.train
        torch.manual_seed(t.seed)
        args = vision_model_args(config, ShardManifest.read(data_dir))
        self.model = ImageClassifier(VisionConfig(**args)).train()
        self.optimizer = adamw(self.model, t.learning_rate, t.weight_decay, "32-true")
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: warmup_cosine(s, t.warmup_steps, t.max_steps, t.min_lr_ratio)
        )
        self.shifts, self.generator = AugmentConfig(**augment_args(config)), torch.Generator().manual_seed(t.seed)
        self.batches = self._forever(plain_loader(files, t.batch_size, t.seed, config.image.loader_workers))
        self.times, self.waits, self.losses = [], [], []

    @staticmethod
    def _forever(loader):
        while True:
            yield from loader

    def step(self) -> None:
        from models.vision import augment

        start = time.perf_counter()
        images, targets = next(self.batches)
        fetched = time.perf_counter()
        _, loss = self.model(augment(images, self.shifts, self.generator), targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.train.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.train.grad_clip)
        self.optimizer.step()
        self.schedule.step()
        self.losses.append(float(loss.detach()))
        self.times.append(time.perf_counter() - start)
        self.waits.append(fetched - start)


class LoaderClock:
    """Times each `next()` on Foundry's training loader (`ShardBatches`), as the plain loop times its own: within
    `with LoaderClock() as clock:` the loader's iterator is wrapped, the product code unchanged. Lightning asks for a
    batch ahead of the step that uses it, so a step's wait is the time its gap spent in `next()`, whichever batch
    that fetched. The fetch that ends an epoch (StopIteration) is timed too: the loader's work at an epoch's end
    is a wait as well."""

    def __init__(self):
        self.fetches: list[tuple[float, float]] = []  # (start, seconds)

    def __enter__(self) -> LoaderClock:
        from foundry.vision.training import ShardBatches

        self.unwrapped = unwrapped = ShardBatches.__iter__

        def timed(loader):
            batches = unwrapped(loader)
            while True:
                start = time.perf_counter()
                batch = next(batches, None)
                self.fetches.append((start, time.perf_counter() - start))
                if batch is None:
                    return
                yield batch

        ShardBatches.__iter__ = timed
        return self

    def __exit__(self, *exc) -> None:
        from foundry.vision.training import ShardBatches

        ShardBatches.__iter__ = self.unwrapped

    def since(self, mark: float) -> float:
        """Seconds in `next()` of the fetches that started after `mark`; the ones before are dropped."""
        seconds = sum(took for start, took in self.fetches if start >= mark)
        self.fetches = []
        return seconds


def interleaved(plain: PlainLoop, max_steps: int, clock: LoaderClock):
    """A Lightning callback that runs one plain step after each of Foundry's from step SKIP on, so load from other
    work hits both alike. Ours is timed from the end of the previous plain step to the end of our step; its data
    wait is the time in the loader's `next()` within that (`clock`), as the plain one's; `gaps` holds the whole
    time from there to our step's start (the loader and Lightning's loop between steps)."""
    import lightning as L

    class Interleave(L.Callback):
        def __init__(self):
            self.times, self.waits, self.gaps, self.losses = [], [], [], []
            self.first_start = self.last_end = self.start = 0.0
            self.mark: float | None = None

        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            self.start = time.perf_counter()
            self.first_start = self.first_start or self.start

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            self.last_end = time.perf_counter()
            self.losses.append(float(outputs["loss"]))
            if self.mark is not None:
                self.times.append(self.last_end - self.mark)
                self.gaps.append(self.start - self.mark)
                self.waits.append(clock.since(self.mark))
            if SKIP <= trainer.global_step < max_steps:
                plain.step()
                self.mark = time.perf_counter()

    return Interleave()


def training_side(config, data_dir: Path, files) -> dict:
    from foundry.runtime.arithmetic import cpu_threads
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    t = config.train
    torch.set_num_threads(cpu_threads(t))  # the trainer sets the same
    plain = PlainLoop(config, data_dir, files)
    for _ in range(SKIP):  # warm-up, as ours has before its timed steps
        plain.step()
    plain.times, plain.waits = [], []
    with LoaderClock() as clock:
        ours = interleaved(plain, t.max_steps, clock)
        start = time.perf_counter()
        train(config, TrainingRun(data_dir, WORK / "checkpoints"), progress=False, callbacks=(ours,))
        end = time.perf_counter()
    pairs = len(ours.times)
    out = {
        "foundry": (t.batch_size * pairs / sum(ours.times), sum(ours.waits) / sum(ours.times)),
        "between steps": sum(ours.gaps) / sum(ours.times),
        "plain": (t.batch_size * pairs / sum(plain.times[:pairs]), sum(plain.waits[:pairs]) / sum(plain.times[:pairs])),
    }
    ratios = sorted(p / o for o, p in zip(ours.times, plain.times))
    for side, losses in (("foundry", ours.losses), ("plain", plain.losses)):
        print(
            f"digits training, {side}: {out[side][0]:,.0f} images/s over {pairs} steps, data wait "
            f"{100 * out[side][1]:.1f}% of step, train loss (last 20 steps) {statistics.mean(losses[-20:]):.3f}"
        )
    print(
        f"digits training: plain/ours step time, paired: median {statistics.median(ratios):.2f}x, quartiles "
        f"{ratios[len(ratios) // 4]:.2f}x-{ratios[3 * len(ratios) // 4]:.2f}x; ours' train() call: "
        f"{ours.first_start - start:.1f} s to its first step, {end - ours.last_end:.1f} s after its last "
        f"(final checkpoint, model.pt); between our steps (loader and Lightning's loop) "
        f"{100 * out['between steps']:.1f}% of step"
    )
    return out


def default_run(config, data_dir: Path):
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train
    from foundry.vision.evaluate import evaluate_images

    start = time.perf_counter()
    model = train(config, TrainingRun(data_dir, WORK / "default-checkpoints"), progress=False)
    metrics = evaluate_images(config, model, data_dir)
    print(
        f"default run ({config.train.max_steps} steps, {time.perf_counter() - start:.1f} s with evaluation): "
        f"holdout accuracy {metrics.accuracy:.3f}, macro F1 {metrics.macro_f1:.3f} on {metrics.images} images; "
        f"nearest class mean {metrics.nearest_class_mean_accuracy:.3f}, majority {metrics.majority_accuracy:.3f}"
    )
    return metrics


def ratio(times: dict[str, list[float]], ours: str, theirs: str) -> float:
    """Throughput of `ours` over `theirs` on the same work: their median time over ours."""
    return statistics.median(times[theirs]) / statistics.median(times[ours])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", type=int, default=5000, help="64x64 RGB PNGs in the larger set")
    parser.add_argument("--steps", type=int, default=200, help="training steps of each timed run")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side per measure, alternating")
    parser.add_argument("--workers", type=int, default=2, help="loader processes of each side (image.loader_workers)")
    parser.add_argument("--no-accuracy", action="store_true", help="leave out (5), the default run's 2,000 steps")
    parser.add_argument(
        "--decoded-cache-mb", type=int, default=None, help="image.decoded_cache_mb of (3) (default: the config's)"
    )
    args = parser.parse_args()
    if args.steps <= SKIP + 1:
        parser.error(f"--steps must be above {SKIP + 1}")
    try:
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; work folder {WORK}")
        workers = f"image.loader_workers={args.workers}"
        default = load_config(REPO / "configs" / "vision.yaml", [workers])
        start = time.perf_counter()
        source = synthetic_source(WORK / "synthetic-source", args.synthetic)
        print(f"synthetic: {args.synthetic} 64x64 RGB PNGs written in {time.perf_counter() - start:.1f} s")
        configs = {
            "digits": default,
            "synthetic": load_config(
                REPO / "configs" / "vision.yaml",
                [f"data.source={source}", "image.size=64", "image.channels=rgb", workers],
            ),
        }
        short = max(args.repeats, SHORT_REPEATS)
        prepared = {
            name: prepare_side(cfg, name, short if name == "digits" else args.repeats) for name, cfg in configs.items()
        }
        hydrated = {name: hydrate_side(cfg, name, prepared[name], short) for name, cfg in configs.items()}
        files = {name: plain_files(hydrated[name][0], WORK / f"{name}-files") for name in configs}
        loading = {
            name: loading_side(cfg, name, hydrated[name][0], files[name], args.repeats) for name, cfg in configs.items()
        }
        timed_config = load_config(
            REPO / "configs" / "vision.yaml",
            [
                f"train.max_steps={args.steps}",
                "train.val_every_n_steps=1000000",
                "checkpoint.every_n_steps=1000000",
                workers,
            ]
            + ([] if args.decoded_cache_mb is None else [f"image.decoded_cache_mb={args.decoded_cache_mb}"]),
        )
        training = training_side(timed_config, hydrated["digits"][0], files["digits"])
        metrics = None if args.no_accuracy else default_run(default, hydrated["digits"][0])
        prep = {name: ratio(p["times"], "foundry", "plain") for name, p in prepared.items()}
        hydrate = {name: ratio(h[1], "hydrate", "cp") for name, h in hydrated.items()}
        load = {name: rates["foundry"] / rates["plain"] for name, rates in loading.items()}
        print(
            f"vision: prepare {prep['synthetic']:.2f}x plain (synthetic; digits {prep['digits']:.2f}x), "
            f"loading {load['synthetic']:.2f}x plain (digits {load['digits']:.2f}x), "
            f"train {training['foundry'][0] / training['plain'][0]:.2f}x plain, "
            f"data wait {100 * training['foundry'][1]:.1f}% of step with {timed_config.image.decoded_cache_mb} MiB "
            f"of decoded images kept (plain {100 * training['plain'][1]:.1f}%; ours between steps, Lightning's loop "
            f"included, {100 * training['between steps']:.1f}%), "
            f"hydrate {hydrate['synthetic']:.2f}x cp -r (digits {hydrate['digits']:.2f}x)"
            + (
                ""
                if metrics is None
                else f"; holdout accuracy {metrics.accuracy:.3f} (nearest class mean "
                f"{metrics.nearest_class_mean_accuracy:.3f}, majority {metrics.majority_accuracy:.3f})"
            )
        )
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
