"""Training stall per checkpoint, synchronous vs asynchronous; checkpoint write throughput vs `dd`.

    python bench/checkpoint.py [--saves 3] [--every 10] [--set model.n_layer=8 ...]

Trains a ~60M-parameter GPT (8 layers, width 768; tiny batches, so the steps are short and the
checkpoints, ~0.7 GB with AdamW's moments, dominate) with `foundry.training.trainer`'s own Trainer, once with
`checkpoint.async_save=false` and once with `true`. The stall is the time the training thread
spends in one save (Lightning's state dump plus, synchronously, the whole write; asynchronously,
the copy to host memory), the median over all saves but the first (which also allocates the
reused host buffers). The write is the background part: serialise, write, fsync, rename, manifest.
`dd bs=4M conv=fsync` of the same size into the same folder is the disk's baseline. The whole run
(`trainer.fit`, every save and the wait for the last background write included) is timed too: on few
cores the background write competes with training for them, so a smaller stall need not mean a
shorter run. The last line is the headline (target: asynchronous stall at most 0.10x the synchronous one).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if "FOUNDRY_HOME" not in os.environ:  # a throwaway home (MLflow store, checkpoints), removed at exit
    os.environ["FOUNDRY_HOME"] = tempfile.mkdtemp(prefix="foundry-bench-")
    atexit.register(shutil.rmtree, os.environ["FOUNDRY_HOME"], True)

from foundry.runtime.env import configure_environment  # noqa: E402

configure_environment()  # before the libraries load

MODEL = ["model.n_layer=8", "model.n_embd=768", "model.n_head=12", "model.block_size=64", "train.batch_size=2"]


def timed(owner, name: str, log: list[float]):
    """Wrap `owner.name` so every call's duration is appended to `log`."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            log.append(time.perf_counter() - start)

    setattr(owner, name, wrapper)
    return original


def train_with_checkpoints(config, folder: Path) -> dict:
    import numpy as np

    from foundry.checkpointing.manifest import read_manifest
    from foundry.checkpointing.writer import CheckpointEvery, ManifestCheckpointIO
    from foundry.core.workload import named
    from foundry.pretrain.training import vocabulary_only
    from foundry.training.trainer import Progress, _trainer, build_module
    from models.data import RandomWindows, RankDraw, SequentialWindows
    from models.gpt import Block

    stalls, writes = [], []
    originals = timed(CheckpointEvery, "save", stalls), timed(ManifestCheckpointIO, "_save", writes)
    try:
        m, t = config.model, config.train
        tokens = np.random.default_rng(0).integers(0, config.tokenizer.vocab_size, 1_000_000, dtype=np.uint16)
        io = ManifestCheckpointIO(folder, config.checkpoint.keep_last, config.checkpoint.async_save)
        # The GPT's blocks, as the text workload names them, without building the module before the clock starts.
        trainer = _trainer(config, None, io, Progress(bar=False), {Block})
        loader = RandomWindows(tokens, m.block_size, t.batch_size, RankDraw(t.seed, steps_per_epoch=10**6))
        start = time.perf_counter()
        trainer.fit(
            build_module(config, named("text"), vocabulary_only(config.tokenizer.vocab_size)),
            loader,
            SequentialWindows(tokens[:10_000], m.block_size, t.batch_size, max_batches=1),
        )
        total = time.perf_counter() - start
    finally:
        CheckpointEvery.save, ManifestCheckpointIO._save = originals
    size = (folder / read_manifest(folder)[-1].file).stat().st_size
    # The first asynchronous save also allocates its staging buffers; later ones reuse them.
    return {
        "stall": statistics.median(stalls[1:] or stalls),
        "stalls": stalls,
        "write": statistics.median(writes),
        "total": total,
        "bytes": size,
    }


def dd_seconds(folder: Path, size: int) -> float:
    path = folder / "dd.bin"
    start = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={path}", "bs=4M", f"count={max(1, size >> 22)}", "conv=fsync"],
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - start
    path.unlink()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--every", type=int, default=10, help="steps between checkpoints (more than a write takes)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    from foundry.config import load_config

    base = [
        *MODEL,
        f"train.max_steps={args.every * args.saves}",
        f"checkpoint.every_n_steps={args.every}",
        "train.val_every_n_steps=100000",
        "checkpoint.keep_last=1",
        "train.precision=32-true",  # as its figures were measured: a step's time sets the stall's share
        "train.compile=false",
        *args.overrides,
    ]
    print(f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.saves} checkpoints each way")
    results = {}
    for mode in ("false", "true"):
        with tempfile.TemporaryDirectory(dir=os.environ["FOUNDRY_HOME"]) as folder:
            results[mode] = train_with_checkpoints(
                load_config(None, [*base, f"checkpoint.async_save={mode}"]), Path(folder)
            )
            results[mode]["dd"] = dd_seconds(Path(folder), results[mode]["bytes"])
        r = results[mode]
        print(
            f"async_save={mode}: {r['bytes'] / 2**20:,.0f} MiB a checkpoint; stall {1000 * r['stall']:,.0f} ms, "
            f"write {r['write']:.2f} s ({r['bytes'] / r['write'] / 2**20:,.0f} MiB/s; dd "
            f"{r['bytes'] / r['dd'] / 2**20:,.0f} MiB/s); whole run {r['total']:.1f} s; "
            f"every stall (ms): {[round(1000 * x) for x in r['stalls']]}",
            flush=True,
        )
    sync, background = results["false"], results["true"]
    write_vs_dd = (sync["bytes"] / sync["write"]) / (sync["bytes"] / sync["dd"])
    print(f"load now {os.getloadavg()[0]:.2f}")
    print(
        f"checkpoint: async stall {background['stall'] / sync['stall']:.2f}x sync "
        f"({1000 * background['stall']:,.0f} ms vs {1000 * sync['stall']:,.0f} ms); whole run async "
        f"{background['total'] / sync['total']:.2f}x sync ({background['total']:.1f} s vs {sync['total']:.1f} s); "
        f"write {write_vs_dd:.2f}x dd throughput"
    )


if __name__ == "__main__":
    main()
