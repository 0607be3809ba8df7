"""models.vision (both architectures, their estimates, augmentation) and foundry.vision.shards (write, read back)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from foundry.vision.shards import ImageRecord, ShardDataset, ShardManifest, records_of, write_shards
from models.vision import AugmentConfig, ImageClassifier, VisionConfig, augment, classifier_from_saved

TINY = {
    "cnn": VisionConfig(num_classes=3, arch="cnn", in_channels=1, image_size=8, widths=(4, 8)),
    "vit": VisionConfig(num_classes=3, arch="vit", in_channels=3, image_size=8, patch_size=4, n_layer=1, n_embd=8),
}


def images_of(cfg: VisionConfig, batch: int = 2, seed: int = 0) -> torch.Tensor:
    shape = (batch, cfg.in_channels, cfg.image_size, cfg.image_size)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("arch", ["cnn", "vit"])
def test_both_architectures_give_logits_a_loss_and_gradients_for_every_parameter(arch):
    torch.manual_seed(0)
    model = ImageClassifier(TINY[arch])
    logits, loss = model(images_of(TINY[arch]), torch.tensor([0, 2]))
    loss.backward()
    assert logits.shape == (2, 3) and all(p.grad is not None for p in model.parameters())


def test_channels_last_input_gives_the_same_logits():
    torch.manual_seed(0)
    model = ImageClassifier(TINY["cnn"]).eval()
    images = images_of(TINY["cnn"], batch=2)
    expected, _ = model(images)
    got, _ = model.to(memory_format=torch.channels_last)(images.contiguous(memory_format=torch.channels_last))
    assert torch.allclose(got, expected, atol=1e-5)


def test_parameter_counts_follow_the_layers():
    cnn = ImageClassifier(TINY["cnn"])
    # conv 1->4 (36) + BN (8), conv 4->8 (288) + BN (16), head 8->3 (27)
    assert cnn.num_params() == 36 + 8 + 288 + 16 + 27
    vit = ImageClassifier(TINY["vit"])
    C, tokens = 8, 1 + 4
    patch, block = 3 * 16 * C + C, 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (8 * C * C + 5 * C)
    assert vit.num_params() == patch + C + tokens * C + block + 2 * C + (C * 3 + 3)


def test_flops_per_image_is_three_forward_passes_of_two_flops_per_multiply_add():
    cnn = ImageClassifier(TINY["cnn"])
    # 8x8: conv 1->4 at 8x8, conv 4->8 at 4x4, head
    assert cnn.flops_per_image() == 6 * (9 * 1 * 4 * 64 + 9 * 4 * 8 * 16 + 8 * 3)


def test_a_config_rejects_a_patch_size_that_does_not_divide_the_image():
    with pytest.raises(ValueError, match="not a multiple of patch_size"):
        VisionConfig(num_classes=3, arch="vit", image_size=10, patch_size=4)


def test_a_saved_model_rebuilds_from_its_args_after_a_json_round_trip():
    torch.manual_seed(0)
    model = ImageClassifier(TINY["cnn"]).eval()
    saved = {"model_args": {**model.config.to_dict(), "widths": [4, 8]}, "state_dict": model.state_dict()}
    images = images_of(TINY["cnn"])
    assert torch.equal(classifier_from_saved(saved)(images)[0], model(images)[0])


def test_augmentation_is_the_same_for_the_same_seed_and_differs_for_another():
    images = images_of(TINY["vit"], batch=8)
    cfg = AugmentConfig(crop_padding=2, translate=0.1, flip=True)
    first = augment(images, cfg, torch.Generator().manual_seed(1))
    again = augment(images, cfg, torch.Generator().manual_seed(1))
    other = augment(images, cfg, torch.Generator().manual_seed(2))
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_a_shift_moves_pixels_and_fills_with_zeros():
    image = torch.arange(16, dtype=torch.uint8).view(1, 1, 4, 4) + 1
    generator = torch.Generator().manual_seed(0)
    out = augment(image, AugmentConfig(crop_padding=1), generator)
    same = torch.Generator().manual_seed(0)
    dy, dx = (int(torch.randint(-1, 2, (1,), generator=same)) for _ in range(2))
    expected = torch.nn.functional.pad(image, (1, 1, 1, 1))[..., 1 + dy : 5 + dy, 1 + dx : 5 + dx]
    assert (dy, dx) != (0, 0) and torch.equal(out, expected)


def test_a_few_steps_on_separable_images_reduce_the_loss():
    """Class 0 dark, class 1 bright: both architectures learn it in a few steps."""
    torch.manual_seed(0)
    labels = torch.arange(32) % 2
    images = (labels.view(-1, 1, 1, 1) * 200 + torch.randint(0, 40, (32, 3, 8, 8))).to(torch.uint8)
    for cfg in (TINY["cnn"], TINY["vit"]):
        cfg = VisionConfig(**{**cfg.to_dict(), "in_channels": 3, "num_classes": 2})
        model = ImageClassifier(cfg)
        optimizer = torch.optim.AdamW(model.optimizer_groups(0.0), lr=1e-2)
        losses = []
        for _ in range(8):
            _, loss = model(images, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0] * 0.7, (cfg.arch, losses)


def _png(path: Path, pixels: np.ndarray) -> None:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())


@pytest.fixture
def image_table(tmp_path) -> tuple[list[ImageRecord], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    records, pixels = [], []
    for i in range(7):
        array = rng.integers(0, 256, (5, 6, 3), dtype=np.uint8)
        _png(tmp_path / f"{i}.png", array)
        records.append(ImageRecord(str(tmp_path / f"{i}.png"), ["cat", "dog"][i % 2], "holdout" if i > 4 else "train"))
        pixels.append(array)
    return records, pixels


def test_shards_read_back_every_image_and_label_of_a_split(image_table, tmp_path):
    records, pixels = image_table
    write_shards(records, tmp_path / "shards", shard_images=2)
    read = [(image.tolist(), label) for image, label in ShardDataset(tmp_path / "shards", "train")]
    written = [
        (p.transpose(2, 0, 1).tolist(), ["cat", "dog"].index(r.label))
        for r, p in zip(records, pixels, strict=True)
        if r.split == "train"
    ]
    assert read == written


def test_the_manifest_counts_the_images_and_names_the_shards(image_table, tmp_path):
    records, _ = image_table
    manifest = write_shards(records, tmp_path / "shards", shard_images=2)
    assert manifest == ShardManifest.read(tmp_path / "shards")
    assert (manifest.classes, manifest.shape, manifest.counts, [s.file for s in manifest.shards]) == (
        ["cat", "dog"],
        (3, 5, 6),
        {"train": {"cat": 3, "dog": 2}, "holdout": {"cat": 1, "dog": 1}},
        ["train-00000.tar", "train-00001.tar", "train-00002.tar", "holdout-00000.tar"],
    )


def test_the_same_table_gives_the_same_shard_bytes(image_table, tmp_path):
    records, _ = image_table

    def digests(folder: Path) -> dict[str, str]:
        write_shards(records, folder, shard_images=3)
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}

    assert digests(tmp_path / "a") == digests(tmp_path / "b")


def test_a_label_outside_the_given_classes_is_named(image_table, tmp_path):
    records, _ = image_table
    with pytest.raises(ValueError, match=r"\['dog'\] are not among the classes"):
        write_shards(records, tmp_path / "shards", classes=["cat"])


def test_records_of_a_table_resolve_paths_against_the_staged_folder(tmp_path):
    rows = [{"path": "images/a.png", "label": 3, "split": "holdout"}]
    assert records_of(rows, tmp_path) == [ImageRecord(str(tmp_path / "images/a.png"), "3", "holdout")]


def test_a_changed_shard_is_named_by_verify(image_table, tmp_path):
    records, _ = image_table
    manifest = write_shards(records, tmp_path / "shards", shard_images=4)
    with open(tmp_path / "shards" / "train-00001.tar", "r+b") as f:
        f.seek(600)
        f.write(b"x")
    with pytest.raises(ValueError, match="train-00001.tar differs from its digest"):
        manifest.verify(tmp_path / "shards")


@pytest.mark.parametrize("tool", ["pack", "gnu", "pax"])
def test_a_shards_members_read_directly_are_tarfiles_and_another_tools_tar_is_read_too(tmp_path, tool):
    """The direct reader of pack's layout against `tarfile`, on sizes at and around the 512-byte blocks; a tar
    another tool wrote (GNU or pax headers, a long name) is read through tarfile."""
    import tarfile

    from foundry.vision.shards import members, pack

    blobs = [bytes([n % 251]) * n for n in (0, 1, 511, 512, 513, 1024, 5000)]
    path = tmp_path / "shard.tar"
    if tool == "pack":
        pack(path, ((blob, n) for n, blob in enumerate(blobs)))
    else:
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT if tool == "gnu" else tarfile.PAX_FORMAT) as tar:
            for n, blob in enumerate(blobs):
                info = tarfile.TarInfo(f"{'long-' * 30}{n:08d}.png")
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    with tarfile.open(path) as tar:
        expected = [(m.name, tar.extractfile(m).read()) for m in tar]
    assert list(members(path)) == expected and len(expected) == len(blobs) * (2 if tool == "pack" else 1)


def test_pack_writes_the_bytes_tarfile_writes_for_its_members(tmp_path):
    """`pack` builds ustar headers itself; a shard must stay byte for byte what tarfile made of it before."""
    import tarfile

    from foundry.vision.shards import pack

    images = [(bytes([n % 251]) * n, n % 12) for n in (0, 1, 511, 512, 513, 1024, 5000, 20_000)]
    with tarfile.open(tmp_path / "tarfile.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, (png, index) in enumerate(images):
            for name, data in ((f"{key:08d}.png", png), (f"{key:08d}.cls", str(index).encode())):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = (
                    len(data),
                    0,
                    0o444,
                    0,
                    0,
                    "",
                    "",
                )
                tar.addfile(info, io.BytesIO(data))
    assert pack(tmp_path / "pack.tar", images) == len(images)
    assert (tmp_path / "pack.tar").read_bytes() == (tmp_path / "tarfile.tar").read_bytes()
    pack(tmp_path / "empty.tar", [])
    with tarfile.open(tmp_path / "empty-tarfile.tar", "w", format=tarfile.USTAR_FORMAT):
        pass
    assert (tmp_path / "empty.tar").read_bytes() == (tmp_path / "empty-tarfile.tar").read_bytes()
