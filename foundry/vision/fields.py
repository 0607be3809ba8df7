"""What images add to the models every workload shares (named in its registration, `foundry.core.registrations`).

`ManifestFields`: what every image dataset's manifest has and a text dataset's has not, where a text dataset has its
tokens. `ScoresFields`: a classifier's figures in `foundry evaluate`'s `ModelScores`. The image config sections are
`foundry.vision.config`'s.
"""

from __future__ import annotations

from pydantic import BaseModel

from foundry.core.metrics.images import VisionMetrics


class ManifestFields(BaseModel):
    """An image dataset's classes and shapes, required on one (`foundry.data.manifest`)."""

    classes: list[str] | None = None  # image: labels in class-index order
    image_shape: tuple[int, int, int] | None = None  # image: (C, H, W) of every image
    image_counts: dict[str, dict[str, int]] | None = None  # image: split -> label -> images
    shard_manifest: str | None = None  # image: the shards' own manifest (foundry.vision.shards.ShardManifest)


class ScoresFields(BaseModel):
    """An image classifier on images (`foundry.vision.scoring`)."""

    vision: VisionMetrics | None = None  # an image classifier on images (`foundry.vision.scoring`)
