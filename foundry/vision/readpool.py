"""Reading a listing's images on every core: each source file read once, fingerprinted (sha256), decoded,
fitted, dHashed and encoded as its staged PNG, in worker processes when there are images enough to pay their start.

Why so (bench/README.md, the vision section): PNG encoding holds the GIL, so threads do not share it out; and a
file per staged image cost ~0.25 ms to create and ~2.6 ms a folder to remove on the reference machine's disk. So
each process appends its PNGs to one spool file of its own (`spool-<pid>.bin` in the folder it is given), and
only a `PngRef` (file, offset, length) comes back; the shards are written from the spools (`SpoolReader`). The
results come back in the listing's order, each image's bytes the same whichever process made them, so the
output is byte-identical for any number of processes.
"""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from foundry.core.digests import sha256_file
from foundry.core.forking import default_signals, frozen_heap
from foundry.vision.config import ImageConfig
from foundry.vision.decode import UndecodableImage, decode
from foundry.vision.neardup import dhash

MIN_PER_WORKER = 256  # fewer images a process: fewer processes (a start costs about what 100 images do)
# No image back from the workers in this long: one is stuck. A chunk is at most 64 images, each at most
# data.max_file_bytes; one prepare waited 9 minutes on a worker once, and was killed (the cause is not found).
STALL_S = 300


class ReadersStalled(RuntimeError):
    """The image readers sent nothing back for STALL_S seconds."""


@dataclass(frozen=True, slots=True)
class PngRef:
    """Where a staged PNG's bytes are: `length` bytes at `offset` of the spool file `spool` (a name in its folder)."""

    spool: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)  # slots: one a source image, held until the split
class Read:
    """One source image as it was read: its fingerprint, and unless `error` says why it is not readable (or
    `purged`, its pixels' hash among those a purge removed), what prepare keeps of it."""

    size: int
    source_sha256: str  # of the file's bytes ("" when they could not be read)
    error: str = ""
    purged: bool = False
    sha256: str = ""  # of the pixels, as `foundry.vision.decode.pixel_sha256`
    shape: tuple[int, ...] = ()  # the pixels': (H, W) or (H, W, 3)
    metadata: tuple[str, ...] = ()
    dhash: bytes = b""  # the dHash's bits, packed (`bits` unpacks them): 32 bytes, not an array of 256 booleans
    dhash_bits: int = 0
    png: PngRef | None = None

    @property
    def bits(self) -> np.ndarray | None:
        """The dHash, one boolean a bit (None for an image not decoded)."""
        if not self.dhash_bits:
            return None
        return np.unpackbits(np.frombuffer(self.dhash, np.uint8), count=self.dhash_bits).astype(bool)

    @property
    def channels(self) -> int:
        return 1 if len(self.shape) == 2 else self.shape[2]


class _Reader:
    """What each process runs on a path; opens its spool at its first image, in the process that reads it."""

    def __init__(self, image: ImageConfig, max_file_bytes: int, purged: frozenset[str], spools: Path):
        self.image, self.max_file_bytes, self.purged, self.spools = image, max_file_bytes, purged, spools
        self.spool, self.name, self.offset = None, "", 0

    def __call__(self, path: str) -> Read:
        try:
            size = os.stat(path).st_size
            if size > self.max_file_bytes:
                detail = f"{size} bytes, more than data.max_file_bytes ({self.max_file_bytes})"
                return Read(size, sha256_file(Path(path)), detail)
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            return Read(-1, "", str(exc))
        fingerprint = hashlib.sha256(data).hexdigest()
        try:
            decoded = decode(io.BytesIO(data), self.image)
        except (UndecodableImage, OSError) as exc:
            return Read(len(data), fingerprint, str(exc))
        if decoded.sha256 in self.purged:  # never spooled: a purged image's bytes are not written anywhere
            return Read(len(data), fingerprint, purged=True)
        pixels = decoded.image()
        bits = dhash(pixels, self.image.hash_size)
        png = self._append(decoded.png(pixels))
        return Read(
            len(data),
            fingerprint,
            sha256=decoded.sha256,
            shape=decoded.pixels.shape,
            metadata=decoded.metadata,
            dhash=np.packbits(bits).tobytes(),
            dhash_bits=len(bits),
            png=png,
        )

    def _append(self, png: bytes) -> PngRef:
        if self.spool is None:
            self.name = f"spool-{os.getpid()}.bin"
            self.spool = open(self.spools / self.name, "ab", buffering=0)  # unbuffered: in the file when returned
            self.offset = os.fstat(self.spool.fileno()).st_size
        view, written = memoryview(png), 0
        while written < len(png):
            written += self.spool.write(view[written:])
        ref = PngRef(self.name, self.offset, len(png))
        self.offset += len(png)
        return ref

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None


_reader: _Reader | None = None  # a worker process's, set by `_install` when the pool starts it


def _install(reader: _Reader) -> None:
    global _reader
    default_signals()
    _reader = reader


def _read(paths: list[str]) -> list[Read]:
    return [_reader(path) for path in paths]


def processes(image: ImageConfig, images: int) -> int:
    """How many processes read `images` images: image.workers (0: the cores this process may run on), fewer
    when each would get under MIN_PER_WORKER images, and 1 where processes cannot be forked."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    wanted = image.workers or cores
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(wanted, images // MIN_PER_WORKER))


def read_images(
    paths: list[Path], image: ImageConfig, max_file_bytes: int, purged: frozenset[str], spools: Path
) -> list[Read]:
    """Each path read as `Read`, in their order; the PNGs spooled into `spools` (created)."""
    spools.mkdir(parents=True, exist_ok=True)
    reader = _Reader(image, max_file_bytes, frozenset(purged), spools)
    workers = processes(image, len(paths))
    if workers == 1:
        try:
            return [reader(str(path)) for path in paths]
        finally:
            reader.close()
    # fork: the workers start in milliseconds with the modules already imported; they log nothing and use no torch
    with frozen_heap():
        pool = multiprocessing.get_context("fork").Pool(workers, initializer=_install, initargs=(reader,))
    with pool:  # its end terminates the workers, a stuck one too
        size = max(1, min(64, len(paths) // (workers * 8)))
        chunks = [[str(path) for path in paths[at : at + size]] for at in range(0, len(paths), size)]
        reads = pool.imap(_read, chunks)
        return [read for chunk in chunks for read in _next_reads(reads, chunk)]


def _next_reads(reads, chunk: list[str]) -> list[Read]:
    """The reads of `chunk`, the next of the pool's `reads`; ReadersStalled after STALL_S without them."""
    try:
        return reads.next(timeout=STALL_S)
    except multiprocessing.TimeoutError:
        raise ReadersStalled(
            f"the image readers sent nothing back in {STALL_S} s for the {len(chunk)} images from {chunk[0]}; "
            "none should take that long (image.workers: 1 reads them in this process)"
        ) from None


class SpoolReader:
    """Reads spooled PNGs back by their `PngRef`, one open file per spool."""

    def __init__(self, spools: Path):
        self.spools, self.files = Path(spools), {}

    def read(self, ref: PngRef) -> bytes:
        if ref.spool not in self.files:
            self.files[ref.spool] = os.open(self.spools / ref.spool, os.O_RDONLY)
        return os.pread(self.files[ref.spool], ref.length, ref.offset)

    def close(self) -> None:
        for fd in self.files.values():
            os.close(fd)
        self.files = {}

    def __enter__(self) -> SpoolReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
