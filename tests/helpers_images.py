"""Images: a learnable tiny image dataset, gray PNGs of a few brightness levels, their shards, and a classifier that
is right on them by construction."""

from __future__ import annotations

from pathlib import Path

import numpy as np

IMAGE_CLASSES = ("bright", "dark", "stripes")


def write_image_dataset(root: Path, size: int = 12) -> Path:
    """48 gray images of `IMAGE_CLASSES` (bright, dark, striped: learnable in a few steps) as a prepared image
    dataset: 36 for training in 4 shards of 10, 10, 10, 6 and 12 held out in 2. Returns its folder."""
    from PIL import Image

    from foundry.vision.shards import ImageRecord, write_shards

    rng, records = np.random.default_rng(0), []
    (root / "png").mkdir(parents=True, exist_ok=True)
    for n in range(48):
        label, noise = IMAGE_CLASSES[n % 3], rng.integers(0, 40, (size, size))
        stripes = np.where(np.arange(size)[:, None] % 2 == 0, 215, 0)  # rows alternately bright and dark
        pixels = {"bright": 215 + noise, "dark": noise, "stripes": stripes + noise}[label]
        path = root / "png" / f"{n:03d}.png"
        Image.fromarray(pixels.astype(np.uint8), mode="L").save(path)
        records.append(ImageRecord(str(path), label, "train" if n < 36 else "holdout"))
    write_shards(records, root / "data", shard_images=10)
    return root / "data"


BRIGHTNESS = {"dark": 10, "mid": 128, "bright": 245}  # label -> pixel level of its 8x8 gray images


def gray_png(path: Path, level: int, seed: int, size: int = 8) -> Path:
    """An 8x8 gray PNG near `level` (noise of +-6 levels, from `seed`)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = np.clip(level + rng.integers(-6, 7, (size, size)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def image_shards(folder: Path, counts: dict[str, dict[str, int]]) -> Path:
    """A prepared image dataset's shards in `folder`: counts {split: {label: images}} of BRIGHTNESS's labels."""
    from foundry.vision.shards import ImageRecord, write_shards

    staged = folder / "staged"
    staged.mkdir(parents=True)
    records, seed = [], 0
    for split, labels in counts.items():
        for label, n in labels.items():
            for _ in range(n):
                seed += 1
                path = gray_png(staged / f"{seed}.png", BRIGHTNESS[label], seed)
                records.append(ImageRecord(str(path), label, split))
    write_shards(records, folder / "data", classes=list(BRIGHTNESS))
    return folder / "data"


def brightness_classifier(path: Path, perfect: bool = True, seed: int = 0) -> Path:
    """An image classifier's model.pt for BRIGHTNESS's classes (8x8 gray, resize). `perfect`: one 1x1 conv
    channel that passes the normalised pixels, BN shifting them to [0, 2], mean pooling, and a head whose logits
    2*c*m - c*c pick the nearest of the levels c = 0, 1, 2: right on every image. Else random weights."""
    import torch

    from models.vision import ImageClassifier, VisionConfig

    torch.manual_seed(seed)
    cfg = VisionConfig(num_classes=3, in_channels=1, image_size=8, widths=(1,) if perfect else (4, 8))
    model = ImageClassifier(cfg).eval()
    if perfect:
        conv, bn, head = model.net.features[0], model.net.features[1], model.net.head
        with torch.no_grad():
            conv.weight.zero_()
            conv.weight[0, 0, 1, 1] = 1.0
            bn.running_mean.zero_(), bn.running_var.fill_(1.0 - bn.eps), bn.weight.fill_(1.0), bn.bias.fill_(1.0)
            head.weight.copy_(torch.tensor([[0.0], [2.0], [4.0]]))
            head.bias.copy_(torch.tensor([0.0, -1.0, -4.0]))
    torch.save(
        {
            "modality": "image",
            "model_args": cfg.to_dict(),
            "state_dict": model.state_dict(),
            "classes": list(BRIGHTNESS),
            "image": {"size": 8, "channels": "gray", "mode": "resize"},
        },
        path,
    )
    return path
