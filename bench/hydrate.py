"""Hydration throughput against `cp -r` of the same files from the same local DVC remote.

    python bench/hydrate.py [--mb 2048] [--shards 4] [--repeats 4]

Builds a synthetic dataset (token shards of random uint16, a manifest as `prepare` writes it), versions and
pushes it with Foundry's own code, then times, from a fresh home each time, (a) `cp -r` of the
remote's folder and (b) `hydrate_version()` (DVC pull, checkout, verification of every file, atomic swap).
The default size, 2 GiB in shards of 512 MiB, is a small real dataset: hydration has a fixed cost of
~0.25 s (a DVC repo, its state database), which a 512 MiB dataset would let dominate (see README).
The last line is the headline: hydrate throughput as a fraction of cp's (target >= 0.8x).
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def make_dataset(root: Path, total_mb: int, shards: int) -> int:
    import numpy as np

    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    tokens_per_shard = total_mb * (1 << 20) // 2 // shards
    entries = []
    for i in range(shards):
        name = f"train_{i:03d}.bin"
        data = rng.integers(0, 4096, tokens_per_shard, dtype=np.uint16).tobytes()
        (root / name).write_bytes(data)
        entries.append(
            {
                "file": name,
                "split": "train",
                "dtype": "uint16",
                "tokens": tokens_per_shard,
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    from foundry.core.digests import folder_digests  # as foundry.pretrain.prepare lists them
    from foundry.data.manifest import FILE, DatasetManifest

    total = tokens_per_shard * shards
    DatasetManifest(
        source="bench",
        source_digest="",
        source_skipped={},
        stats={"train_bytes": total, "holdout_bytes": 0},
        holdout_fraction=0.0,
        vocab_size=4096,
        eot_id=0,
        dtype="uint16",
        shards=entries,
        train_tokens=total,
        holdout_tokens=0,
        files=folder_digests(root, skip=FILE),
    ).write(root)
    return sum((root / e["file"]).stat().st_size for e in entries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=2048)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-hydrate-"))
    os.environ["FOUNDRY_HOME"] = str(work / "home")
    from foundry.runtime.env import configure_environment

    configure_environment()
    from foundry.config import FoundryConfig
    from foundry.core.contracts import SourceManifest
    from foundry.data.hydrate import hydrate_version
    from foundry.data.versioning import version_dataset

    try:
        size = make_dataset(work / "staged", args.mb, args.shards)
        source_manifest = SourceManifest(
            source="bench", sources=[], digest="", files=0, bytes=0, skipped={}, entries=[]
        )
        data = version_dataset(FoundryConfig(), work / "staged", source_manifest, work / "home")
        remote = Path(data.remote)
        cp_times, hydrate_times = [], []
        for i in range(args.repeats):
            # Alternate which goes first, so neither always finds the other's pages in the cache.
            for which in ("cp", "hydrate") if i % 2 == 0 else ("hydrate", "cp"):
                t = time.perf_counter()
                if which == "cp":
                    subprocess.run(["cp", "-r", str(remote), str(work / f"cp-{i}")], check=True)
                    cp_times.append(time.perf_counter() - t)
                else:
                    hydrate_version(data, work / f"node-{i}")
                    hydrate_times.append(time.perf_counter() - t)
            shutil.rmtree(work / f"cp-{i}")
            shutil.rmtree(work / f"node-{i}")
        cp_s, hy_s = statistics.median(cp_times), statistics.median(hydrate_times)
        mb = size / (1 << 20)
        print(f"dataset: {mb:.0f} MiB in {args.shards} shards; median of {args.repeats}; load {os.getloadavg()[0]:.2f}")
        print(f"cp -r:   {cp_s:.3f} s  {mb / cp_s:.0f} MiB/s")
        print(f"hydrate: {hy_s:.3f} s  {mb / hy_s:.0f} MiB/s (pull + checkout + verify + swap)")
        print(f"hydrate_vs_cp: {cp_s / hy_s:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
