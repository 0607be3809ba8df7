"""Image shard formats against plain PNG files: write time, shard size and read throughput.

    nice -n 19 python bench/vision_shards.py [--synthetic 20000] [--workers 2] [--repeats 2]

Two datasets: sklearn's digits (1,797 8x8 grayscale, the default vision dataset) and a synthetic set of
64x64 RGB PNGs. Every contender stores the same PNG bytes and decodes them with Pillow into uint8 CHW tensors
in a `DataLoader` with the same workers and batch size; each read must yield every image once.
- plain: one PNG file per image, a map-style Dataset (the PyTorch baseline)
- webdataset: tar shards (`foundry.vision.shards`, the format Foundry writes), read by `webdataset.WebDataset`
- litdata: `litdata.optimize` chunks, read by `litdata.StreamingDataset`, when litdata is installed (it is not a
  dependency: it requires torchvision, whose wheel on the index breaks `import lightning` beside the CPU torch;
  `pip install --no-deps litdata==0.2.76 obstore tifffile` to measure it)
The last line is the headline: read throughput of the chosen format and LitData against plain files.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")  # never ask PyPI for a newer version

from foundry.vision.shards import ImageRecord, ShardDataset, write_shards  # noqa: E402

BATCH = 256


def png_bytes(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def decode(data: bytes) -> torch.Tensor:
    array = np.asarray(Image.open(io.BytesIO(data)))
    return torch.from_numpy((array[:, :, None] if array.ndim == 2 else array).transpose(2, 0, 1).copy())


def digits_images() -> list[tuple[np.ndarray, int]]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = (digits.images * (255 / 16)).round().astype(np.uint8)
    return list(zip(pixels, digits.target.tolist(), strict=True))


def synthetic_images(n: int) -> list[tuple[np.ndarray, int]]:
    """Smooth colour fields (an 8x8 grid upsampled) with a little noise: PNG compresses them as it would photos."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
        noise = rng.integers(-8, 9, (64, 64, 3))
        out.append((np.clip(coarse.astype(int) + noise, 0, 255).astype(np.uint8), i % 10))
    return out


def write_plain(images, root: Path) -> list[ImageRecord]:
    records = []
    for i, (pixels, label) in enumerate(images):
        path = root / "png" / f"{i:06d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png_bytes(pixels))
        records.append(ImageRecord(path=str(path), label=str(label), split="train"))
    return records


class PlainDataset(torch.utils.data.Dataset):
    def __init__(self, records: list[ImageRecord], classes: list[str]):
        self.records, self.index = records, {c: i for i, c in enumerate(classes)}

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        record = self.records[i]
        return decode(Path(record.path).read_bytes()), self.index[record.label]


def _litdata_item(record: tuple[str, int]) -> dict:
    path, label = record
    return {"png": Path(path).read_bytes(), "label": label}


def has_litdata() -> bool:
    return importlib.util.find_spec("litdata") is not None


def write_litdata(records: list[ImageRecord], classes: list[str], out: Path) -> None:
    litdata = importlib.import_module("litdata")  # optional: see the docstring

    index = {c: i for i, c in enumerate(classes)}
    inputs = [(r.path, index[r.label]) for r in records]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its progress bars
        litdata.optimize(fn=_litdata_item, inputs=inputs, output_dir=str(out), chunk_bytes="16MB", num_workers=1)


class LitDataImages(torch.utils.data.IterableDataset):
    def __init__(self, root: Path):
        self.root = root

    def __iter__(self):
        litdata = importlib.import_module("litdata")
        for item in litdata.StreamingDataset(str(self.root)):
            yield decode(item["png"]), item["label"]


def read_passes(dataset, workers: int, repeats: int) -> list[tuple[int, float]]:
    """(images, seconds) of each pass after a first, untimed one (the workers' start-up: a fixed cost of
    seconds on a loaded machine that would otherwise dominate a small set), through a DataLoader with persistent
    workers: decoding and the batches' collation included, no model."""
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=workers, persistent_workers=True)
    passes = []
    for _ in range(repeats + 1):
        start, count = time.perf_counter(), 0
        for _images, labels in loader:
            count += len(labels)
        passes.append((count, time.perf_counter() - start))
    return passes[1:]


def folder_mb(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20


def measure(name: str, images, tmp: Path, workers: int, repeats: int) -> dict[str, float]:
    start = time.perf_counter()
    records = write_plain(images, tmp / name)
    plain_write = time.perf_counter() - start
    classes = sorted({r.label for r in records})
    start = time.perf_counter()
    write_shards(records, tmp / name / "wds", shard_images=max(1, len(records) // (4 * workers)))
    wds_write = time.perf_counter() - start
    readers = {
        "plain": lambda: PlainDataset(records, classes),
        "webdataset": lambda: ShardDataset(tmp / name / "wds", "train"),
    }
    writes = {"plain": plain_write, "webdataset": wds_write}
    sizes = {"plain": folder_mb(tmp / name / "png"), "webdataset": folder_mb(tmp / name / "wds")}
    if has_litdata():
        start = time.perf_counter()
        write_litdata(records, classes, tmp / name / "litdata")
        writes["litdata"] = time.perf_counter() - start
        sizes["litdata"] = folder_mb(tmp / name / "litdata")
        readers["litdata"] = lambda: LitDataImages(tmp / name / "litdata")
    rates = {}
    for reader, make in readers.items():
        passes = read_passes(make(), workers, repeats)
        assert all(count == len(records) for count, _ in passes), f"{reader} read {passes}, not {len(records)} images"
        rates[reader] = len(records) / min(seconds for _, seconds in passes)
    print(f"{name}: {len(records)} images, {workers} workers, batch {BATCH}, best of {repeats}")
    for reader in readers:
        print(
            f"  {reader:<10} read {rates[reader]:>8.0f} images/s  ({rates[reader] / rates['plain']:.2f}x plain)"
            f"  write {writes[reader]:6.2f} s  {sizes[reader]:7.1f} MiB"
        )
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", type=int, default=20000, help="64x64 RGB images in the larger set")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        measure("digits", digits_images(), Path(tmp), args.workers, args.repeats)
        rates = measure("synthetic", synthetic_images(args.synthetic), Path(tmp), args.workers, args.repeats)
    litdata = f", litdata {rates['litdata'] / rates['plain']:.2f}x plain" if "litdata" in rates else ""
    print(
        f"vision_shards: webdataset {rates['webdataset'] / rates['plain']:.2f}x plain{litdata} "
        f"(read, {args.synthetic} 64x64 RGB PNGs, {args.workers} workers)"
    )


if __name__ == "__main__":
    main()
