"""The `image` settings of the vision data stage: how images are fitted to one size and de-duplicated.

A config section in the style of `foundry.config` (unknown keys rejected, every key described), not yet
part of `FoundryConfig`: the text defaults and `params.yaml` stay as they are until the flow reads it.
The split share and `on_error` come from the `data` section, as for text.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from foundry.config.base import _Section

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
INDEX_EXTENSIONS = (".csv", ".jsonl")


class ImageConfig(_Section):
    size: int = Field(32, ge=4, le=4096, description="Side in pixels of the square every image is fitted to.")
    mode: Literal["resize", "center_crop", "pad"] = Field(
        "resize",
        description="How an image becomes size x size: resize (stretch, aspect not kept), center_crop (scale the "
        "short side to size, cut the middle) or pad (scale the long side to size, black borders).",
    )
    channels: Literal["auto", "gray", "rgb"] = Field(
        "auto",
        description="Colour of the staged images: auto keeps grayscale images gray (1 channel) and makes every other "
        "one RGB (3; alpha dropped); gray or rgb converts all.",
    )
    hash_size: int = Field(
        16,
        ge=4,
        le=32,
        description="Side of the difference hash (dHash) grid: hash_size**2 bits per image for near-duplicate search "
        "(16: 256 bits; 8 is too coarse for images of a few dozen pixels, whole classes of digits collide).",
    )
    near_dup_distance: int = Field(
        10,
        ge=-1,
        le=64,
        description="Most differing dHash bits at which an image counts as a near duplicate of an earlier kept "
        "one (or of a parent's, which keeps its split); -1 removes exact duplicates only.",
    )
    index: str = Field(
        "",
        description="Name of a CSV or JSONL file of path,label inside a folder or archive source (paths relative to "
        "it); empty: a folder source is read class-per-subfolder, a .csv/.jsonl file source as the index.",
    )
    max_pixels: int = Field(
        50_000_000, gt=0, description="Largest image (width x height) decoded; a larger one is dropped or fatal."
    )

    @model_validator(mode="after")
    def _checks(self) -> ImageConfig:
        if self.index and not self.index.endswith(INDEX_EXTENSIONS):
            raise ValueError(f"image.index {self.index!r} must name a .csv or .jsonl file")
        if self.near_dup_distance >= self.hash_size**2:
            raise ValueError(
                f"image.near_dup_distance ({self.near_dup_distance}) must be below the hash's "
                f"{self.hash_size**2} bits, or every image would be a near duplicate"
            )
        return self
