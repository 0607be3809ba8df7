"""The image loader's worker processes resume exactly: a loader with `image.loader_workers` 2, stopped after three
batches and resumed from its saved state, draws what an uninterrupted one draws over two epochs. In the slow lane:
each of its loaders starts and stops two worker processes (about 20 s in all on 2 cores); the same check with the
batches decoded in the training process is in tests/fast/vision/test_vision_train.py."""

from __future__ import annotations

from helpers_align import assert_resumes_exactly
from helpers_images import write_image_dataset

from foundry.vision.training import ShardBatches


def test_a_loader_with_workers_resumed_mid_epoch_draws_the_batches_an_uninterrupted_one_draws(tmp_path):
    dataset = write_image_dataset(tmp_path / "images", 12)  # the fast test's image size
    assert_resumes_exactly(lambda: ShardBatches(dataset, 8, seed=3, workers=2))
