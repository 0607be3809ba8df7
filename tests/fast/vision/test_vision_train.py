"""Image classification through the one trainer (`foundry.training.trainer.train`): a dataset folder of image
shards trains `LitVision` for a few steps on CPU, writes an image `model.pt`, and resumes bitwise exactly;
the shard loaders give every rank the same number of batches and resume at their position."""

from __future__ import annotations

import gzip
import itertools
import math
import shutil
import signal
import tarfile
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from helpers_align import assert_resumes_exactly
from helpers_configs import tiny
from helpers_forking import raising_at_sigterm
from helpers_images import IMAGE_CLASSES, write_image_dataset
from helpers_training import digest
from lightning.pytorch import Callback

from foundry.checkpointing.manifest import read_manifest
from foundry.training.progress import read_progress
from foundry.vision import training
from foundry.vision.shards import ShardManifest, member_spans
from foundry.vision.training import DecodedImages, HoldoutBatches, RankImages, ShardBatches
from models.vision import classifier_from_saved

CLASSES = IMAGE_CLASSES
SIZE = 12
# Every optimizer step from two micro-batches, each augmented: the loader's position, the micro-batch count and
# the augmentation's seeds all have to come back on resume. 36 training images of 8 a batch: 4 batches an epoch,
# so step 5 (batch 10) resumes mid-epoch.
SETTINGS = (
    "train.max_steps=10",
    "train.grad_accum_steps=2",
    "train.learning_rate=0.01",
    "train.warmup_steps=0",
    "train.log_every_n_steps=5",
    "train.val_every_n_steps=5",
    "checkpoint.every_n_steps=5",
)


@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory) -> Path:
    return write_image_dataset(tmp_path_factory.mktemp("images"), SIZE)


class StopAt(Callback):
    """Ends training after optimizer step `step` (after that step's checkpoint), as an interruption would."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


class Losses(Callback):
    def __init__(self):
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def _train(dataset: Path, folder: Path, *callbacks, resume_from: Path | None = None) -> Path:
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    return train(
        tiny(*SETTINGS),
        TrainingRun(dataset, folder, None, "v-img", resume_from),
        False,
        callbacks=callbacks,
        progress_file=folder / "progress.json",
    )


@pytest.fixture(scope="module")
def straight(image_dataset, tmp_path_factory) -> tuple[Path, list[float]]:
    losses = Losses()
    return _train(image_dataset, tmp_path_factory.mktemp("straight"), losses), losses.losses


def test_ten_steps_lower_the_loss_and_model_pt_rebuilds_a_classifier_that_predicts(image_dataset, straight):
    path, losses = straight
    assert len(losses) == 20  # 10 steps of 2 micro-batches
    report = read_progress(path.parent / "progress.json")
    assert (report.step, report.unit) == (10, "images") and report.tokens_per_sec > 0  # the run page's line
    assert np.mean(losses[-4:]) < 0.7 * np.mean(losses[:4]), losses
    saved = torch.load(path, weights_only=True)
    assert saved["modality"] == "image" and saved["classes"] == list(CLASSES)
    assert saved["image"] == {"size": SIZE, "channels": "gray", "mode": "resize"}
    assert saved["data_version"] == "v-img" and saved["model_args"]["num_classes"] == 3
    model = classifier_from_saved(saved)
    images, labels = next(iter(HoldoutBatches(image_dataset, 12)))
    with torch.no_grad():
        predicted = model(images)[0].argmax(-1)
    assert (predicted == labels).float().mean().item() >= 0.75, (predicted, labels)


def test_five_steps_then_five_resumed_give_the_weights_of_ten_straight(image_dataset, straight, tmp_path, monkeypatch):
    """The loader's workers are started ahead of the fit for a fresh run only: a resumed loader starts where its
    checkpoint puts it, inside the fit."""
    started, start_workers = [], ShardBatches.start_workers
    monkeypatch.setattr(ShardBatches, "start_workers", lambda self: started.append(1) or start_workers(self))
    folder = tmp_path / "ckpt"
    _train(image_dataset, folder, StopAt(5))
    assert [e.step for e in read_manifest(folder)] == [5] and len(started) == 1
    resumed = _train(image_dataset, folder, resume_from=folder / "step-000005.ckpt")
    assert digest(resumed) == digest(straight[0]) and len(started) == 1


def test_the_loaders_worker_processes_end_with_the_training(image_dataset, tmp_path):
    """`image.loader_workers` 2 (the tiny config's): none is left to a later garbage collection, which ended them
    only after a 5 s timeout each (the training loop's reference cycles hold the loader)."""
    before = {p.pid for p in psutil.Process().children()}
    started = []

    class Workers(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            started.extend(p.pid for p in psutil.Process().children() if p.pid not in before)

    _train(image_dataset, tmp_path / "run", Workers())
    assert len(set(started)) == 2  # the workers decoded this training's batches
    alive = [p for p in psutil.Process().children() if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []


def test_every_rank_gets_the_same_batches_an_epoch_and_its_own_images(image_dataset):
    # 4 shards of 10, 10, 10, 6 over 3 ranks: whole shards, 16, 10 and 10 images; 2 batches of 4 each
    ranks = [ShardBatches(image_dataset, 4, seed=1, rank=r, world_size=3) for r in range(3)]
    assert [len(r) for r in ranks] == [2, 2, 2]
    seen = [[img.numpy().tobytes() for images, _ in r for img in images] for r in ranks]
    assert [len(s) for s in seen] == [8, 8, 8]
    assert not set(seen[0]) & set(seen[1]) and not set(seen[1]) & set(seen[2]) and not set(seen[0]) & set(seen[2])


def test_fewer_shards_than_ranks_give_each_rank_a_stride_of_every_shard(image_dataset):
    ranks = [ShardBatches(image_dataset, 2, seed=1, rank=r, world_size=5) for r in range(5)]
    # 36 images in 4 shards over 5 ranks: images n % 5 == rank of each shard, 7 to 8 a rank
    assert [len(r) for r in ranks] == [3] * 5
    seen = [img.numpy().tobytes() for r in ranks for images, _ in r for img in images]
    assert len(seen) == len(set(seen)) == 30


@pytest.mark.parametrize("kept", [0, 1 << 20])  # decoded every epoch; all kept, the resumed epoch's rest decoded
def test_a_loader_resumed_mid_epoch_draws_the_batches_an_uninterrupted_one_draws(image_dataset, kept):
    """With batches decoded in the training process; with worker processes: tests/slow/vision/."""
    assert_resumes_exactly(lambda: ShardBatches(image_dataset, 8, seed=3, workers=0, decoded_limit=kept))


def test_worker_processes_decode_the_batches_of_the_training_process_in_its_order(image_dataset):
    """Three epochs, a pause mid-epoch included: the workers run on across epochs, each decoding every other batch;
    with decoded images kept or not, in the workers or in this process, the batches are the same."""
    epochs = {}
    for workers, kept in ((0, 0), (2, 0), (0, 1 << 20), (2, 1 << 20)):
        loader = ShardBatches(image_dataset, 4, seed=5, workers=workers, decoded_limit=kept)
        first = iter(loader)
        batches = [next(first), next(first)]  # a pause: the rest of the epoch is taken by another iterator
        batches += [b for _ in range(3) for b in loader]
        images, labels = torch.cat([images for images, _ in batches]), torch.cat([labels for _, labels in batches])
        epochs[workers, kept] = (images, labels)
        loader.close()  # its workers end now, not at a later test's garbage collection
    assert len(epochs[0, 0][1]) == 3 * 36
    assert all(torch.equal(a, b) for other in epochs.values() for a, b in zip(epochs[0, 0], other))


def test_a_later_epoch_decodes_only_the_images_not_kept(image_dataset):
    everything = ShardBatches(image_dataset, 4, seed=5, decoded_limit=1 << 20)
    for _ in range(2):
        list(everything)
    assert everything.decoded_images.decodes == 36  # each of the 36 training images once
    shape = ShardManifest.read(image_dataset).shape
    one_image = math.prod(shape) + DecodedImages.ENTRY_BYTES
    assert 4 * one_image < RankImages.bytes_for(36, shape)  # too little for them all: kept one by one
    four = ShardBatches(image_dataset, 4, seed=5, decoded_limit=4 * one_image)
    for _ in range(2):
        list(four)
    assert four.decoded_images.held == 4 * one_image and len(four.decoded_images.images) == 4
    assert four.decoded_images.decodes == 36 + 32  # the second epoch decodes the 32 it could not keep


@pytest.mark.parametrize("shuffle", [training.SHUFFLE_BUFFER, 10])  # the buffer holds all 36 images; it fills
@pytest.mark.parametrize("started", [False, True])  # the workers started at the first batch; ahead, as the trainer does
def test_a_rank_whose_images_all_fit_is_gathered_here_from_its_second_epoch_with_the_same_batches(
    image_dataset, shuffle, started
):
    """36 images, 4 batches of 8 an epoch: the workers decode the 32 the first epoch draws, this process the 4 left
    (as it starts the workers, or at the epoch's end); later epochs decode nothing, and the workers end with
    `close`."""
    before = {p.pid for p in psutil.Process().children()}
    every_epoch_decoded = ShardBatches(image_dataset, 8, seed=5, shuffle=shuffle)
    kept = ShardBatches(image_dataset, 8, seed=5, shuffle=shuffle, workers=2, decoded_limit=1 << 20)
    assert isinstance(kept.decoded_images, RankImages)
    if started:
        kept.start_workers()
        assert kept.decoded_images.decodes == 4 and kept.decoded_images.held.sum() == 4
    for epoch in range(3):
        for (images, labels), (want_images, want_labels) in zip(kept, every_epoch_decoded, strict=True):
            assert torch.equal(images, want_images) and torch.equal(labels, want_labels)
        assert kept.decoded_images.complete and kept.decoded_images.decodes == 4, epoch
    kept.close()
    alive = [p for p in psutil.Process().children() if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []


def test_a_first_epoch_that_draws_every_image_leaves_nothing_to_decode_here(image_dataset):
    """36 images, 9 batches of 4, from workers started before the first batch is asked for (as the trainer starts
    them); they end with `close`."""
    before = {p.pid for p in psutil.Process().children()}
    kept = ShardBatches(image_dataset, 4, seed=5, workers=2, decoded_limit=1 << 20)
    kept.start_workers()
    assert len([p for p in psutil.Process().children() if p.pid not in before]) == 2
    assert len(list(kept)) == 9 and len(list(kept)) == 9
    assert kept.decoded_images.complete and kept.decoded_images.decodes == 0
    kept.close()
    alive = [p for p in psutil.Process().children() if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []


def signals_in(pid: int, field: str) -> set[int]:
    """The signals of a process's `field` in /proc (SigCgt: caught by a handler; SigIgn: ignored)."""
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(field))
    mask = int(line.split()[1], 16)
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


def test_the_loaders_workers_end_at_sigterm_whatever_handler_the_flow_process_set(image_dataset):
    """Forked from a flow, the workers kept Prefect's SIGTERM handler, which raises in them."""
    before = {p.pid for p in psutil.Process().children()}
    kept = ShardBatches(image_dataset, 4, seed=5, workers=2, decoded_limit=1 << 20)
    with raising_at_sigterm():
        kept.start_workers()
    try:
        batches = iter(kept)
        next(batches), next(batches)  # one from each worker: both have run their `worker_init_fn`
        workers = [p.pid for p in psutil.Process().children() if p.pid not in before]
        assert len(workers) == 2
        for pid in workers:
            assert signal.SIGTERM not in signals_in(pid, "SigCgt") and signal.SIGINT in signals_in(pid, "SigIgn")
    finally:
        kept.close()


@pytest.mark.parametrize("start", [0, 3])
def test_workers_for_a_rank_held_here_decode_one_epoch_and_no_more(image_dataset, start):
    """What each worker runs (`_Ahead`, here as the one worker) when the training process holds the rank's images:
    the epoch's batches from `start`, then nothing, where the workers used to decode on into epochs no one asked
    for."""
    loader = ShardBatches(image_dataset, 4, seed=5)
    want = list(loader.plan.samples(0, start))
    one_epoch = list(itertools.islice(training._Ahead(loader.plan, 0, start, decoded_limit=0, one_epoch=True), 99))
    assert len(one_epoch) == len(want) == len(loader) - start
    for (images, labels), samples in zip(one_epoch, want, strict=True):
        want_images, want_labels = training._batch(samples, DecodedImages(0))
        assert np.array_equal(images, want_images.numpy()) and np.array_equal(labels, want_labels.numpy())


def test_a_loader_with_workers_keeping_its_rank_resumed_mid_epoch_draws_the_batches_an_uninterrupted_one_draws(
    image_dataset,
):
    """The resumed epoch's first batches are never drawn: this process decodes them at its end."""
    assert_resumes_exactly(lambda: ShardBatches(image_dataset, 8, seed=3, workers=2, decoded_limit=1 << 20))


def test_images_that_do_not_match_their_manifests_shape_are_refused_by_name():
    kept = RankImages((3, 4, 4), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="do not match their manifest"):
        kept.keep(0, torch.zeros(1, 4, 4, dtype=torch.uint8))


def test_a_loader_worker_keeps_what_it_decoded_from_one_epoch_to_the_next(image_dataset, monkeypatch):
    """What each DataLoader worker runs (`_Ahead`, here as the one worker), two epochs: each image decoded once."""
    decoded, decode = [], training.decode_png
    monkeypatch.setattr(training, "decode_png", lambda png: decoded.append(png) or decode(png))
    loader = ShardBatches(image_dataset, 4, seed=5)
    batches = iter(training._Ahead(loader.plan, 0, 0, decoded_limit=1 << 20))
    for _ in range(2 * len(loader)):
        next(batches)
    assert len(decoded) == 36


def _read_member_by_member(plan, seed: int) -> list:
    """A rank's stream as the loader read it before it kept an index of each shard: every header every epoch."""
    stream = []
    for i in np.random.default_rng(seed).permutation(len(plan.parts)):
        part, first_row = plan.parts[i], sum(p.images for p in plan.parts[:i])
        mine = [s for n, s in enumerate(training._samples(plan.folder / part.file)) if n % part.stride == part.offset]
        stream += [sample._replace(key=first_row + k) for k, sample in enumerate(mine)]
    return stream


@pytest.mark.parametrize("world_size", [1, 3, 5])  # whole shards; whole shards dealt; a stride of every shard
def test_the_stream_from_each_shards_index_is_the_stream_read_member_by_member(image_dataset, world_size):
    for rank in range(world_size):
        plan = ShardBatches(image_dataset, 2, seed=4, rank=rank, world_size=world_size).plan
        for epoch_seed in (0, 1):  # the second epoch reads the index the first one made
            assert list(plan._stream(np.random.default_rng(epoch_seed))) == _read_member_by_member(plan, epoch_seed)


def test_a_shard_another_tar_tool_wrote_is_read_through_tarfile_with_the_same_images(image_dataset, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(image_dataset, copy)
    shard = next(p for p in sorted(copy.glob("train-*.tar")))
    with tarfile.open(image_dataset / shard.name) as tar, tarfile.open(shard, "w", format=tarfile.GNU_FORMAT) as out:
        for member in tar:
            out.addfile(member, tar.extractfile(member))
    assert member_spans(shard.read_bytes()) is None  # GNU headers: not `pack`'s
    assert member_spans((image_dataset / shard.name).read_bytes()) is not None
    ours, theirs = (ShardBatches(folder, 4, seed=2).plan for folder in (image_dataset, copy))
    assert [(s.key, s.png, s.index) for s in theirs._stream(np.random.default_rng(0))] == [
        (s.key, s.png, s.index) for s in ours._stream(np.random.default_rng(0))
    ]


def test_a_compressed_shard_is_refused_by_name(image_dataset, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(image_dataset, copy)
    shard = next(p for p in sorted(copy.glob("train-*.tar")))
    shard.write_bytes(gzip.compress(shard.read_bytes()))
    with pytest.raises(ValueError, match=f"{shard.name}: not an uncompressed tar shard"):
        list(ShardBatches(copy, 4, seed=2))


def test_each_epoch_draws_another_order(image_dataset):
    loader = ShardBatches(image_dataset, 8, seed=3)
    first, second = (torch.cat([labels for _, labels in loader]) for _ in range(2))
    assert sorted(first.tolist()) != first.tolist() and not torch.equal(first, second)


def test_a_batch_larger_than_a_ranks_images_is_refused_by_name(image_dataset):
    with pytest.raises(ValueError, match="lower train.batch_size"):
        ShardBatches(image_dataset, 20, seed=0, rank=0, world_size=2)
