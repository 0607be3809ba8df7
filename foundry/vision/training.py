"""Stage C for images: the LightningModule and the loaders of an image dataset's shards.

The image workload (`foundry.vision.workload`) asks here when the trainer asks it; everything else (the Trainer,
checkpoints, exact resume, several processes, MFU, `model.pt`) is the trainer's (`foundry.training.trainer`).

Training batches come from the `train-*.tar` shards (`foundry.vision.shards`). Each rank reads whole shards (with
fewer shards than ranks, every world_size-th image of each), in an order and through a shuffle buffer both drawn
from (seed, rank, epoch). Every rank takes the same number of batches an epoch, the most the rank with the fewest
images fills, so no rank waits in an all-reduce for one that has run out. The loader's position (epoch, batch) is
in the checkpoint, as `models.data.RandomWindows`'s is; a resumed run reads its epoch's stream again up to that
position without decoding the images it passes, so it draws exactly the batches the interrupted run would have.

With `image.loader_workers` > 0, DataLoader worker processes read and decode the batches ahead of the step (the
trainer's data wait: 19% of a digits step in the training process, bench/README.md's vision section). Each worker
walks the same seeded stream and decodes every n-th batch, and the DataLoader hands them out in turn, so the
batches are those of the training process, in its order; they start as the trainer sets up (`start_workers`), run on
across epochs, and end with the fit (`ShardBatches.close`, which the trainer calls).

Where all of a rank's decoded images fit `image.decoded_cache_mb`, the training process keeps them in one array
(`RankImages`) as the batches arrive, and decodes those no batch of the epoch draws itself (as it starts the workers,
or at the epoch's end): from the second epoch a batch is one gather in the training process, with nothing to decode
or receive (a worker's batch cost 0.61 ms to receive, of a 5.1 ms digits step with the time between steps). The
workers then decode the first epoch only, all of it ahead if the trainer's set-up leaves them the time, and wait idle
until the fit ends. Decoding on into epochs no one would ask for, they took the cores from the steps. Where they do
not fit, each process keeps the images it decoded up to that size (`DecodedImages`) and does not decode them again in
a later epoch (a worker sees every image over the epochs, so each may come to hold all of them: up to loader_workers x
decoded_cache_mb a training process).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np
import torch

from foundry.config import FoundryConfig
from foundry.core.forking import default_signals, frozen_heap
from foundry.vision.shards import ShardFile, ShardManifest, decode_png, mapped, member_spans, members, tar_spans
from models.data import ResumableEpochs, check_rank
from models.vision import AugmentConfig, VisionConfig

T = TypeVar("T")
SHUFFLE_BUFFER = 4096  # images; fixed: no config section has a key for it
# A worker's batch of fewer bytes comes back pickled through the pipe, a larger one in shared memory: a tensor
# through shared memory costs ~3 ms a batch on the reference machine (its segment and file descriptor), a 4 KiB
# digits batch pickled 0.16 ms.
PIPED_BYTES = 4 << 20
PREFETCH = 4  # batches a worker decodes ahead; more where the training process holds the images (`_prefetch`)


def vision_model_args(config: FoundryConfig, shards: ShardManifest) -> dict:
    """`VisionConfig` as a dict: classes, channels and size from the data, the rest from `config.vision`."""
    channels, height, width = shards.shape
    if height != width:
        raise ValueError(f"images are {height}x{width}: the classifiers take square images (image.size fits them)")
    return VisionConfig(**config.vision.classifier_args(len(shards.classes), channels, height)).to_dict()


def augment_args(config: FoundryConfig) -> dict:
    """`AugmentConfig` as a dict, from `config.vision`'s augmentation keys."""
    return asdict(AugmentConfig(**config.vision.augment_args()))


def build_vision_module(config: FoundryConfig, shards: ShardManifest, settings: dict, on_gpu: bool = False):
    """`LitVision` with the trainer's `settings` (learning rate, schedule, optimizer, peak FLOP/s).
    Channels-last for a CNN on a GPU only: on 2 CPU cores it measured no faster (3x64x64: 951 against 968 ms a step)."""
    from models.lit_vision import LitVision

    args = vision_model_args(config, shards)
    return LitVision(
        args,
        augment=augment_args(config),
        seed=config.train.seed,
        channels_last=on_gpu and args["arch"] == "cnn",
        **settings,
    )


def saved_extra(config: FoundryConfig, shards: ShardManifest) -> dict:
    """What `model.pt` of an image model holds besides the weights: the labels in index order and the
    preprocessing a request needs (`image.size` square pixels, gray or rgb, fitted by `image.mode`)."""
    channels, size, _ = shards.shape
    image = {"size": size, "channels": "gray" if channels == 1 else "rgb", "mode": config.image.mode}
    return {"modality": "image", "classes": list(shards.classes), "image": image}


class Sample(NamedTuple):
    """One training image as a shard holds it, undecoded (a resume passes it cheaply): `key` is its row among the
    rank's images (`_Plan`), so that its decoded pixels can be kept; None in the holdout."""

    key: int | None
    png: bytes
    index: int


class DecodedImages:
    """The images one process decoded, by `Sample.key`, up to `limit` bytes: a later epoch decodes none of those it
    holds. Which are held changes only the time a batch takes, never its pixels."""

    # What an image held costs besides its pixels: the tensor, the array it shares its pixels with, the key and the
    # dictionary's slot (~1 KB measured for an 8x8 image; the digits' pixels are 64 bytes).
    ENTRY_BYTES = 1024

    def __init__(self, limit: int):
        self.limit, self.held, self.decodes = limit, 0, 0  # decodes: images decoded here
        self.images: dict[int, torch.Tensor] = {}

    def get(self, sample: Sample) -> torch.Tensor:
        image = self.images.get(sample.key)
        if image is None:
            image, self.decodes = decode_png(sample.png), self.decodes + 1
            cost = image.nbytes + self.ENTRY_BYTES
            if sample.key is not None and self.held + cost <= self.limit:
                self.images[sample.key], self.held = image, self.held + cost
        return image


class RankImages:
    """Every training image of a rank whose images all fit `image.decoded_cache_mb`, decoded into one uint8 array by
    row (`Sample.key`), kept by the training process: once every row is held, a batch is one gather here, with
    no decoding and no worker's batch to receive (bench/README.md, the vision section). The pixels are those
    decoding gives, so the batches are the same."""

    def __init__(self, shape: tuple[int, int, int], labels: torch.Tensor):
        self.pixels = torch.empty((len(labels), *shape), dtype=torch.uint8)
        self.labels, self.held, self.decodes = labels, np.zeros(len(labels), dtype=bool), 0

    @staticmethod
    def bytes_for(rows: int, shape: tuple[int, int, int]) -> int:
        """What holding `rows` images of `shape` costs: the pixels, a class (int64) and a flag each."""
        return rows * (math.prod(shape) + 9)

    @property
    def complete(self) -> bool:
        return bool(self.held.all())

    def get(self, sample: Sample) -> torch.Tensor:
        if not self.held[sample.key]:
            self.keep(sample.key, decode_png(sample.png))
            self.decodes += 1
        return self.pixels[sample.key]

    def keep(self, rows: int | torch.Tensor, images: torch.Tensor) -> None:
        if images.shape[-3:] != self.pixels.shape[1:]:
            raise ValueError(
                f"a training image decodes to {tuple(images.shape[-3:])} pixels, not the {tuple(self.pixels.shape[1:])} "
                "of its shards.json: the shards do not match their manifest"
            )
        self.pixels[rows] = images
        self.held[rows] = True

    def keep_batch(
        self, rows: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A worker's `batch` of `rows`, kept, passed on."""
        self.keep(rows, batch[0])
        return batch

    def batch(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pixels.index_select(0, rows), self.labels.index_select(0, rows)


def _samples(path: Path) -> Iterator[Sample]:
    """One shard's samples in its order, unkeyed (the holdout's)."""
    for _, png, label in _images_of(members(path), no_png=b""):
        yield Sample(None, png, int(label))


def _images_of(named: Iterable[tuple[str, T]], no_png: T) -> Iterator[tuple[int, T, T]]:
    """(n, what stands for its PNG, what stands for its class) of each image n of a shard, from its members in
    order, each a name and what stands for its bytes: the bytes themselves, or where they lie (`no_png` for a
    class with no PNG before it, which decodes to nothing)."""
    png, n = no_png, 0
    for name, value in named:
        if name.endswith(".png"):
            png = value
        elif name.endswith(".cls"):
            yield n, png, value
            n += 1


class _Image(NamedTuple):
    """Where one training image's PNG bytes start and end in its shard, and its class."""

    start: int
    end: int
    index: int


def _images_in(path: Path, stride: int, offset: int) -> list[_Image]:
    """The shard's images n with n % stride == offset, found once for every epoch after: reading the headers each
    epoch was most of a digits batch's time in the loader (bench/README.md, the vision section). A shard not in
    `pack`'s layout (another tar tool's) is indexed by `tarfile`."""
    with mapped(path) as data:
        spans = member_spans(data)
        if spans is None:
            spans = tar_spans(path)
        return [
            _Image(*png, int(data[slice(*label)]))
            for n, png, label in _images_of(((name, (start, end)) for name, start, end in spans), no_png=(0, 0))
            if n % stride == offset
        ]


def _batch(samples: list[Sample], decoded: DecodedImages | RankImages) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images (B, C, H, W) and class indices (B,)."""
    images = torch.stack([decoded.get(sample) for sample in samples])
    return images, torch.tensor([sample.index for sample in samples], dtype=torch.int64)


def _sliced(path: Path, images: Iterable[tuple[int, _Image]]) -> Iterator[Sample]:
    """The (row, image) `images` of the shard at `path`, their PNG bytes sliced where the index says."""
    with mapped(path) as data:
        for row, image in images:
            yield Sample(row, data[image.start : image.end], image.index)


@dataclass(frozen=True)
class _Part:
    """What one rank reads of a shard: its images n with n % stride == offset."""

    file: str
    images: int
    stride: int = 1
    offset: int = 0


def rank_parts(shards: list[ShardFile], rank: int, world_size: int) -> list[_Part]:
    """Whole shards, dealt round-robin; with fewer shards than ranks, every rank a stride of each."""
    if len(shards) >= world_size:
        return [_Part(s.file, s.images) for s in shards[rank::world_size]]
    return [_Part(s.file, len(range(rank, s.images, world_size)), world_size, rank) for s in shards]


@dataclass(frozen=True)
class _Plan:
    """What fixes one rank's stream of training images: its parts of the shards, the seed and the shuffle buffer.
    The rank's images are numbered (rows) part after part, in each part's order."""

    folder: Path
    parts: list[_Part]
    batch_size: int
    seed: int
    shuffle: int
    rank: int
    steps_per_epoch: int

    @cached_property
    def _images(self) -> list[list[_Image]]:
        """Each part's images (`_images_in`), found by the first epoch of each process that reads them."""
        return [_images_in(self.folder / part.file, part.stride, part.offset) for part in self.parts]

    @cached_property
    def _first_rows(self) -> list[int]:
        return [0, *itertools.accumulate(len(images) for images in self._images)][:-1]

    @cached_property
    def labels(self) -> torch.Tensor:
        """The class of each row."""
        return torch.tensor([image.index for images in self._images for image in images], dtype=torch.int64)

    def _rows_of(self, i: int) -> range:
        return range(self._first_rows[i], self._first_rows[i] + len(self._images[i]))

    def _stream(self, rng: np.random.Generator) -> Iterator[Sample]:
        for i in rng.permutation(len(self.parts)):
            yield from _sliced(self.folder / self.parts[i].file, zip(self._rows_of(i), self._images[i]))

    def _shuffled(self, stream: Iterator[T], rng: np.random.Generator) -> Iterator[T]:
        """The stream through a buffer of `shuffle` images: each arriving image replaces a random one sent out."""
        buffer: list[T] = []
        for item in stream:
            if len(buffer) < max(1, self.shuffle):
                buffer.append(item)
                continue
            i = int(rng.integers(len(buffer)))
            yield buffer[i]
            buffer[i] = item
        for i in rng.permutation(len(buffer)) if self.shuffle else range(len(buffer)):
            yield buffer[i]

    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.rank, epoch])

    def samples(self, epoch: int, start: int) -> Iterator[list[Sample]]:
        """Epoch `epoch`'s batches from batch `start` on, undecoded: the ones before it are read, not decoded."""
        rng = self._rng(epoch)
        stream = self._shuffled(self._stream(rng), rng)
        for _ in range(start * self.batch_size):
            next(stream)
        for _ in range(start, self.steps_per_epoch):
            yield [next(stream) for _ in range(self.batch_size)]

    def rows(self, epoch: int, start: int) -> Iterator[torch.Tensor]:
        """The rows of `samples(epoch, start)`'s batches, drawn alike."""
        rng, size = self._rng(epoch), self.batch_size
        parts = rng.permutation(len(self.parts))
        stream = np.concatenate([np.arange(r.start, r.stop) for r in map(self._rows_of, parts)])
        if len(stream) > self.shuffle:  # drawn image by image as they are taken, as `samples` draws them
            shuffled = self._shuffled(iter(stream.tolist()), rng)
            batches = (torch.tensor(list(itertools.islice(shuffled, size))) for _ in range(self.steps_per_epoch))
        else:  # the buffer holds the whole stream: `_shuffled`'s one permutation, without its loop
            order = torch.from_numpy(stream[rng.permutation(len(stream))])
            batches = (order[k * size : (k + 1) * size] for k in range(self.steps_per_epoch))
        yield from itertools.islice(batches, start, None)

    def unheld(self, held: np.ndarray) -> Iterator[Sample]:
        """The samples of the rows not `held`, part after part."""
        for i, part in enumerate(self.parts):
            rows = self._rows_of(i)
            lacking = np.flatnonzero(~held[rows.start : rows.stop])
            if len(lacking):
                images = self._images[i]
                yield from _sliced(self.folder / part.file, ((rows[k], images[k]) for k in lacking))


class _Ahead(torch.utils.data.IterableDataset):
    """Batches from (epoch, batch) on, to that epoch's end (`one_epoch`) or epoch after epoch, for a DataLoader's
    workers: worker w of n decodes batches w, w + n, ... and only reads past the others; the DataLoader takes one
    from each in turn."""

    def __init__(self, plan: _Plan, epoch: int, start: int, decoded_limit: int, one_epoch: bool = False):
        super().__init__()
        self.plan, self.epoch, self.start, self.decoded_limit = plan, epoch, start, decoded_limit
        self.one_epoch = one_epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        n, epoch, start, decoded = 0, self.epoch, self.start, DecodedImages(self.decoded_limit)
        while True:
            for samples in self.plan.samples(epoch, start):
                if n % workers == worker:
                    images, labels = _batch(samples, decoded)
                    yield (images.numpy(), labels.numpy()) if images.numel() < PIPED_BYTES else (images, labels)
                n += 1
            if self.one_epoch:
                return
            epoch, start = epoch + 1, 0


def _as_is(batch):
    """The DataLoader's collate: a worker's batch as it sent it (numpy arrays stay arrays: `_tensors`)."""
    return batch


def _tensors(batch) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(torch.from_numpy(part) if isinstance(part, np.ndarray) else part for part in batch)


@dataclass
class _Running:
    """The workers' iterator and the (epoch, batch) of the next batch it yields."""

    batches: Iterator
    at: tuple[int, int]

    def stop(self) -> None:
        """Ends the worker processes now. Left to the garbage collector, the iterator is collected with the training
        loop's reference cycles, whose queues' threads the collector stops first: the iterator's own shutdown then
        waited out its 5 s join for each worker (10 s at some collection after every image training)."""
        self.batches._shutdown_workers()  # what torch runs when the iterator is deleted; it has no public one


class ShardBatches(ResumableEpochs):
    """Shuffled training batches of one rank, `steps_per_epoch` an epoch, resumable mid-epoch (`state_dict`);
    decoded by `workers` DataLoader processes ahead of use, or in this process (0). Where all of the rank's images
    fit `decoded_limit` bytes, this process keeps them (`RankImages`) from the batches it gets, decodes the rest
    (as it starts the workers, or at the end of that epoch) and from then on gathers every batch itself, the workers
    idle until `close`; else each process keeps up to `decoded_limit` bytes of the images it decoded for the epochs
    after (`DecodedImages`)."""

    def __init__(
        self,
        folder: Path,
        batch_size: int,
        seed: int,
        shuffle: int = SHUFFLE_BUFFER,
        rank: int = 0,
        world_size: int = 1,
        workers: int = 0,
        decoded_limit: int = 0,
    ):
        check_rank(rank, world_size)
        self.folder, self.batch_size, self.seed, self.shuffle = Path(folder), batch_size, seed, shuffle
        self.rank, self.world_size = rank, world_size  # the state names its world: resumed in that one only
        manifest = ShardManifest.read(self.folder)
        parts = [rank_parts(manifest.shards_of("train"), r, world_size) for r in range(world_size)]
        fewest = min(sum(p.images for p in mine) for mine in parts)
        self.steps_per_epoch = fewest // batch_size
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"{self.folder}: a rank gets {fewest} training images, fewer than a batch of {batch_size} "
                f"across {world_size} ranks: lower train.batch_size or the number of processes"
            )
        self.parts, self.workers = parts[rank], workers
        self.plan = _Plan(self.folder, self.parts, batch_size, seed, shuffle, rank, self.steps_per_epoch)
        self.decoded_limit = decoded_limit
        # Held here: the rank's images all fit, this process keeps them (`RankImages`), and the workers decode one epoch.
        self.held_here = RankImages.bytes_for(sum(p.images for p in self.parts), manifest.shape) <= decoded_limit
        self.decoded_images = (  # with workers and not held here, each worker keeps its own
            RankImages(manifest.shape, self.plan.labels) if self.held_here else DecodedImages(decoded_limit)
        )
        self._running: _Running | None = None
        self._idle: _Running | None = None  # workers done with their one epoch (`_hold_the_rest`), until `close`

    def _ahead(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The workers' batches from this loader's position: those already running when they stand there
        (the next epoch goes on where the last one ended), else workers started there (a resume, a first epoch)."""
        at = (self.epoch, self.batch_in_epoch)
        if self._running is None or self._running.at != at:
            self.close()
            # Held here, the workers decode this epoch only: decoding on, they took the cores from the steps for
            # batches no one would ask for.
            held_here = self.held_here
            loader = torch.utils.data.DataLoader(
                _Ahead(self.plan, *at, 0 if held_here else self.decoded_limit, one_epoch=held_here),
                batch_size=None,
                num_workers=self.workers,
                prefetch_factor=self._prefetch(at[1]) if held_here else PREFETCH,
                collate_fn=_as_is,
                worker_init_fn=default_signals,
            )
            with frozen_heap():  # the workers are forked here
                self._running = _Running(iter(loader), at)
        return self._running.batches

    def _prefetch(self, start: int) -> int:
        """Batches a worker may decode ahead when the rank is held here: the rest of the epoch, which fits
        `decoded_limit`, where its batches come through the pipe; batches through shared memory hold a segment and a
        file descriptor each until received (Docker's /dev/shm: 64 MB), so PREFETCH of those."""
        piped = self.batch_size * math.prod(self.decoded_images.pixels.shape[1:]) < PIPED_BYTES
        return max(PREFETCH, math.ceil((self.steps_per_epoch - start) / self.workers)) if piped else PREFETCH

    def start_workers(self) -> None:
        """Starts the workers where the loader stands, so that they decode while the trainer sets up; else they start
        at the first batch asked for. Where the rank is held here, this process decodes the images no batch of the
        epoch draws now too, not at the epoch's end (7-19 ms of one step's wait on the digits)."""
        kept = self.decoded_images
        if self.workers and not (self.held_here and kept.complete):
            self._ahead()
            if self.held_here:
                self._hold_the_undrawn(kept)

    def _hold_the_undrawn(self, kept: RankImages) -> None:
        """The images of the rows no batch from here to the epoch's end draws, decoded and kept."""
        drawn = kept.held.copy()
        for rows in self.plan.rows(self.epoch, self.batch_in_epoch):
            drawn[rows.numpy()] = True
        for sample in self.plan.unheld(drawn):
            kept.get(sample)

    def close(self) -> None:
        """Ends the worker processes, if any run; iterating again starts new ones where the loader stands."""
        for workers in (self._running, self._idle):
            if workers is not None:
                workers.stop()
        self._running = self._idle = None

    def _batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        kept, at = self.decoded_images, (self.epoch, self.batch_in_epoch)
        if self.held_here and kept.complete:
            return map(kept.batch, self.plan.rows(*at))
        if not self.workers:
            return (_batch(samples, kept) for samples in self.plan.samples(*at))
        batches = map(_tensors, self._ahead())
        return map(kept.keep_batch, self.plan.rows(*at), batches) if self.held_here else batches

    def _hold_the_rest(self) -> None:
        """After an epoch, decodes here the images `RankImages` still lacks (those no batch drew): from the next
        epoch on every batch is gathered in this process. The workers, their one epoch decoded, wait idle for
        `close`: ending them here took ~20 ms of a step's time on the digits, from a thread ~5 ms."""
        kept = self.decoded_images
        if self.held_here:
            if self._running is not None:
                if self._idle is not None:
                    self._idle.stop()
                self._idle, self._running = self._running, None
            for sample in self.plan.unheld(kept.held):
                kept.get(sample)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        batches = self._batches()
        for i in range(self.batch_in_epoch, self.steps_per_epoch):
            batch = next(batches)
            self.batch_in_epoch = i + 1
            if self._running is not None:
                self._running.at = (self.epoch, i + 1)
            yield batch
        self.epoch, self.batch_in_epoch = self.epoch + 1, 0
        if self._running is not None:
            self._running.at = (self.epoch, 0)
        self._hold_the_rest()


class HoldoutBatches:
    """The holdout's first `max_batches` batches in the written order, the same on every rank (as text's
    `SequentialWindows`: each rank scores them all, and the logged means agree)."""

    def __init__(self, folder: Path, batch_size: int, max_batches: int | None = None):
        self.folder, self.batch_size = Path(folder), batch_size
        manifest = ShardManifest.read(self.folder)
        self.files = [s.file for s in manifest.shards_of("holdout")]
        batches = math.ceil(manifest.images("holdout") / batch_size)
        self.n_batches = min(batches, max_batches) if max_batches else batches

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        stream = (sample for file in self.files for sample in _samples(self.folder / file))
        for _ in range(self.n_batches):
            samples = [s for _, s in zip(range(self.batch_size), stream, strict=False)]
            yield _batch(samples, DecodedImages(0))


def vision_loaders(config: FoundryConfig, data_dir: Path, rank: int, world_size: int):
    """(train, validation) loaders of an image dataset, for the trainer: batch_size images from the first step
    (the batch ramp, measured on text pretraining only, is not applied)."""
    t = config.train
    image = config.image
    decoded_limit = image.decoded_cache_mb << 20
    train = ShardBatches(
        data_dir, t.batch_size, t.seed, SHUFFLE_BUFFER, rank, world_size, image.loader_workers, decoded_limit
    )
    return train, HoldoutBatches(data_dir, t.batch_size, t.val_batches)
