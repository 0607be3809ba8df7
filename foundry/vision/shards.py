"""Image shards: a table of images (path, label, split) written as WebDataset tar shards, and read back.

Each split's images go, in the table's order, into `{split}-{n:05d}.tar` files of `shard_images` images, each
image as two members in WebDataset's layout: `{key}.png` (the file's bytes, unchanged) and `{key}.cls` (the
class index in ASCII). `shards.json` (`ShardManifest`) names the classes, the image shape, the counts and every
shard's digest. The same table gives the same bytes (fixed member order, times, owners and modes, ustar
headers), so DVC sees an unchanged dataset as unchanged.

Why WebDataset and not LitData (bench/vision_shards.py, 2 workers, a loaded 2-core machine): on 20,000 64x64 RGB
PNGs both read at about the speed of plain files in the page cache (0.77x and 0.73x); on the 1,797 8x8 digits
LitData reads faster (1.14x against 0.62x) and is smaller (0.2 against 3.5 MiB: a tar member costs 512-1,024 bytes
of header and padding). But LitData requires torchvision, and the torchvision wheel the package index offers for
torch 2.13 is built against the CUDA torch: installed beside the CPU torch, `import lightning` fails ("operator
torchvision::nms does not exist"). Its `index.json` also carries a write time (not byte-stable) and `optimize`
starts worker processes (10.7 s for the digits against 0.6 s). Tar shards need only the standard library to
write and any tar tool to inspect, and a few large files are what DVC moves fastest.

Reading is `webdataset.WebDataset` over the split's shards (a DataLoader's workers take whole shards, DDP
ranks whole shards too), decoding each PNG with Pillow into a uint8 (C, H, W) tensor.
"""

from __future__ import annotations

import functools
import hashlib
import io
import mmap
import os
import tarfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from PIL import Image

from foundry.core.contracts import _Value
from foundry.core.digests import sha256_file

FILE = "shards.json"
FORMAT = "webdataset"
SPLITS = ("train", "holdout")


@dataclass(frozen=True)
class ImageRecord:
    """One row of the image table: a PNG file, its label, its split."""

    path: str
    label: str
    split: Literal["train", "holdout"]


class ShardFile(_Value):
    file: str
    split: Literal["train", "holdout"]
    images: int
    sha256: str


class ShardManifest(_Value):
    """What a shard folder holds; owns its file (`shards.json` in the folder)."""

    format: Literal["webdataset"] = FORMAT
    classes: list[str]  # the class index is the position here
    shape: tuple[int, int, int]  # (C, H, W) of every image
    counts: dict[str, dict[str, int]]  # split -> label -> images
    shards: list[ShardFile]

    def images(self, split: str) -> int:
        return sum(self.counts.get(split, {}).values())

    def shards_of(self, split: str) -> list[ShardFile]:
        return [s for s in self.shards if s.split == split]

    def write(self, folder: Path) -> Path:
        path = Path(folder) / FILE
        path.write_text(self.model_dump_json(indent=1) + "\n")
        return path

    @classmethod
    def read(cls, folder: Path) -> ShardManifest:
        path = Path(folder) / FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: write the shards with foundry.vision.shards.write_shards")
        return cls.model_validate_json(path.read_text())

    def verify(self, folder: Path) -> None:
        """Raise naming the first shard whose bytes are not the ones the manifest recorded."""
        for shard in self.shards:
            if sha256_file(Path(folder) / shard.file) != shard.sha256:
                raise ValueError(f"{Path(folder) / shard.file} differs from its digest in {FILE}: write it again")


def records_of(table, root: Path | None = None) -> list[ImageRecord]:
    """ImageRecords of a table's rows with path, label and split: a DataFrame, mappings, or objects such as
    `foundry.vision.table.ImageRow`; relative paths are relative to `root` (the staged folder)."""
    rows = table.to_dict("records") if hasattr(table, "to_dict") else list(table)

    def field(row, name: str):
        return row[name] if isinstance(row, Mapping) else getattr(row, name)

    base = Path(root) if root is not None else Path()
    return [ImageRecord(str(base / field(r, "path")), str(field(r, "label")), field(r, "split")) for r in rows]


def image_shape(path: str) -> tuple[int, int, int]:
    with Image.open(path) as image:  # reads the header only
        return (1 if image.mode in ("L", "I;16", "1") else 3, image.height, image.width)


BLOCK, RECORD = tarfile.BLOCKSIZE, tarfile.RECORDSIZE


@functools.cache
def _template() -> bytes:
    """tarfile's ustar header of a member as `pack` writes them (mode 0o444, owners 0 and unnamed, time 0),
    for an empty name and size: `_header` fills in both and the checksum."""
    info = tarfile.TarInfo("")
    info.size, info.mtime, info.mode = 0, 0, 0o444
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")


def _header(name: str, size: int) -> bytes:
    """The header tarfile writes for `name` and `size` (checked against it by tests/fast/vision): tarfile builds
    a TarInfo and copies it per member, which cost the digits' prepare more than their PNGs' encoding."""
    header = bytearray(_template())
    header[0:100] = name.encode("ascii").ljust(100, b"\0")
    header[124:136] = b"%011o\0" % size
    header[148:156] = b" " * 8  # as tarfile: the checksum counts its own field as spaces
    header[148:155] = b"%06o\0" % sum(header)
    return bytes(header)


def pack(path: Path, images: Iterable[tuple[bytes, int]]) -> int:
    """One shard of (PNG bytes, class index) pairs, keyed by their place in it; returns how many it holds
    (a purge writes a shard again through this, without the purged images: `foundry.vision.purge`)."""
    return _pack(path, images)[0]


def _pack(path: Path, images: Iterable[tuple[bytes, int]]) -> tuple[int, str]:
    """`pack`, and the shard's sha256, hashed as it is written: the bytes `tarfile` writes for these members
    in USTAR format (a header, the bytes padded to a block; two zero blocks and padding to a record at the end)."""
    digest, count, written = hashlib.sha256(), 0, 0
    with open(path, "wb") as f:

        def put(data: bytes) -> None:
            nonlocal written
            f.write(data)
            digest.update(data)
            written += len(data)

        for count, (png, index) in enumerate(images, 1):
            key = f"{count - 1:08d}"
            for name, data in ((f"{key}.png", png), (f"{key}.cls", str(index).encode())):
                put(_header(name, len(data)) + data + b"\0" * (-len(data) % BLOCK))
        put(b"\0" * (2 * BLOCK))
        put(b"\0" * (-written % RECORD))
    return count, digest.hexdigest()


def _read_file(path: str) -> bytes:
    return Path(path).read_bytes()


def write_shards(
    records: Iterable[ImageRecord],
    out: Path,
    shard_images: int = 4096,
    classes: list[str] | None = None,
    read: Callable[[str], bytes] = _read_file,
    shapes: list[tuple[int, int, int]] | None = None,
) -> ShardManifest:
    """Write the records' PNGs into shards in `out` (created; must not hold shards) and their manifest.
    `classes` fixes the label order (a fine-tune keeps its parent's indices and may add labels at the end);
    by default the sorted labels. `read` gives a record's PNG bytes from its path (by default the file's);
    `shapes`, each record's (C, H, W) when the caller knows them (else read from each PNG's header)."""
    records = list(records)
    if not records:
        raise ValueError("no images to write: the table is empty")
    classes = list(classes) if classes is not None else sorted({r.label for r in records})
    index = {label: i for i, label in enumerate(classes)}
    unknown = sorted({r.label for r in records} - set(index))
    if unknown:
        raise ValueError(f"labels {unknown[:5]} are not among the classes {classes[:10]}: add them to the classes")
    shapes = Counter(shapes if shapes is not None else (image_shape(r.path) for r in records))
    if len(shapes) > 1:
        raise ValueError(f"images differ in shape (C, H, W): {dict(shapes)}; prepare fits them to one size")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.glob("*.tar")):
        raise FileExistsError(f"{out} already holds shards: write into an empty folder")
    shards = []
    for split in SPLITS:
        rows = [(r.path, index[r.label]) for r in records if r.split == split]
        for n, start in enumerate(range(0, len(rows), shard_images)):
            path = out / f"{split}-{n:05d}.tar"
            images, sha256 = _pack(path, ((read(source), i) for source, i in rows[start : start + shard_images]))
            shards.append(ShardFile(file=path.name, split=split, images=images, sha256=sha256))
    counts = {s: dict(sorted(Counter(r.label for r in records if r.split == s).items())) for s in SPLITS}
    manifest = ShardManifest(classes=classes, shape=next(iter(shapes)), counts=counts, shards=shards)
    manifest.write(out)
    return manifest


@contextmanager
def mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    """A shard's bytes, mapped read-only for the `with` block (an empty file, which cannot be mapped: b"")."""
    with open(path, "rb") as f:
        if not os.fstat(f.fileno()).st_size:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield data


def members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each member of a shard, in order. Read from `pack`'s fixed ustar layout directly
    (`member_spans`); a shard with a header `pack` does not write (another tar tool's) is read by `tarfile`."""
    with mapped(path) as data:
        spans = member_spans(data)
        if spans is None:
            yield from _tar_members(path)
            return
        for name, start, end in spans:
            yield name, data[start:end]


def member_spans(data: bytes | mmap.mmap) -> list[tuple[str, int, int]] | None:
    """(name, start, end) of each member's bytes in a shard's `data`, in order, read from `pack`'s fixed ustar
    layout (a header block, the bytes, padding to 512): `tarfile` parses each header in Python, which cost the
    training loader's workers about as much as decoding the digits. None if any header is not one `pack` writes."""
    spans, pos, end = [], 0, len(data)
    while pos + 512 <= end and data[pos] != 0:
        header = data[pos : pos + 512]
        if header[257:263] != b"ustar\0" or header[156] not in b"0\0" or header[345] != 0:
            return None
        name = header[:100].rstrip(b"\0").decode()
        size = int(header[124:136].rstrip(b"\0 ") or b"0", 8)
        spans.append((name, pos + 512, pos + 512 + size))
        pos += 512 + -(-size // 512) * 512
    return spans


def tar_spans(path: Path) -> list[tuple[str, int, int]]:
    """(name, start, end) of each regular file's bytes in an uncompressed tar written by any tool, as `tarfile`
    finds them (a compressed one is refused: its offsets would be in the decompressed stream)."""
    try:
        with tarfile.open(path, "r:") as tar:
            return [(m.name, m.offset_data, m.offset_data + m.size) for m in tar if m.isfile()]
    except tarfile.ReadError as error:
        raise ValueError(f"{path}: not an uncompressed tar shard ({error})") from error


def _tar_members(path: Path) -> Iterator[tuple[str, bytes]]:
    with tarfile.open(path) as tar:
        for member in tar:
            yield member.name, tar.extractfile(member).read()


def decode_png(data: bytes) -> torch.Tensor:
    """PNG bytes to a uint8 (C, H, W) tensor: 1 channel for grayscale, else 3 (RGB)."""
    with Image.open(io.BytesIO(data)) as image:
        array = np.array(image if image.mode in ("L", "RGB") else image.convert("RGB"))
    return torch.from_numpy(array[None] if array.ndim == 2 else np.ascontiguousarray(array.transpose(2, 0, 1)))


class ShardDataset(torch.utils.data.IterableDataset):
    """A split's (uint8 (C, H, W) image, class index) pairs from its shards, in the written order unless
    `shuffle` > 0 (a buffer of that many images, then shards reordered too, both from `seed`)."""

    def __init__(self, folder: Path, split: str, shuffle: int = 0, seed: int = 0):
        super().__init__()
        self.folder, self.split, self.shuffle, self.seed = Path(folder), split, shuffle, seed
        self.manifest = ShardManifest.read(self.folder)
        if not self.manifest.shards_of(split):
            raise ValueError(f"{self.folder} has no {split!r} shards (splits: {sorted(self.manifest.counts)})")

    def __len__(self) -> int:
        return self.manifest.images(self.split)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        import webdataset as wds

        urls = [str(self.folder / s.file) for s in self.manifest.shards_of(self.split)]
        pipeline = wds.WebDataset(
            urls,
            shardshuffle=len(urls) if self.shuffle else False,  # a buffer of every shard: a full reordering
            seed=self.seed,
            nodesplitter=wds.split_by_node,
            empty_check=False,  # more workers than shards: the spare ones yield nothing
        )
        if self.shuffle:
            pipeline = pipeline.shuffle(self.shuffle, seed=self.seed)
        for sample in pipeline:
            yield decode_png(sample["png"]), int(sample["cls"])
