"""The image sections: `image` (how images are fitted, de-duplicated, sharded and checked) and `vision` (the
classifier's shape and its training-time augmentation), read when `data.modality` is image.

The split share and `on_error` come from the `data` section, as for text. `vision` mirrors
`models.vision.VisionConfig` less what the data decides (classes, channels, size): `classifier_args` adds those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from foundry.config.base import _Section
from foundry.config.variants import fetching, of_modality, with_keys

if TYPE_CHECKING:
    from foundry.config import FoundryConfig
    from foundry.config.data import DataConfig

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
INDEX_EXTENSIONS = (".csv", ".jsonl")


def fetching_images(data: DataConfig) -> DataConfig:
    """The `data` section fetching image files and the index files that label them (`extensions`): what an image
    source's listing fetches, where the text fetcher keeps `extensions` alone."""
    return fetching(data, [*IMAGE_EXTENSIONS, *INDEX_EXTENSIONS])


def image_data(data: DataConfig) -> DataConfig:
    """The `data` section reading images (`modality` image), its other keys kept."""
    return of_modality(data, "image")


def reading_images(config: FoundryConfig, size: int, channels: str, mode: str) -> FoundryConfig:
    """`config` reading images (`data.modality` image) at `size`, in `channels`, fitted by `mode`: as a model
    trained on them takes them."""
    return with_keys(config, data={"modality": "image"}, image={"size": size, "channels": channels, "mode": mode})


class ImageConfig(_Section):
    """Image data (data.modality image): one size, near duplicates, shards and the gate's class checks."""

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
    shard_images: int = Field(
        4096, ge=1, description="Images per WebDataset tar shard of the prepared dataset (train-00000.tar...)."
    )
    workers: int = Field(
        0,
        ge=0,
        description="Processes that read, decode, hash and encode the images in prepare: 0, one per core this "
        "process may run on; 1, the calling process. The prepared data is the same for any number.",
    )
    loader_workers: int = Field(
        2,
        ge=0,
        description="DataLoader worker processes that read and decode training batches ahead of each step (per "
        "training process); 0 decodes them in the training process. The batches are the same for any number.",
    )
    decoded_cache_mb: int = Field(
        128,
        ge=0,
        description="MiB of decoded training images kept so that later epochs do not decode them again. Where a "
        "rank's images all fit (pixels and 9 bytes an image), the training process keeps them and, from the end of "
        "its first epoch, gathers every batch itself, its loader workers idle; else each loader process (the "
        "training process, with no loader workers) keeps up to this many, pixels and ~1 KB an image of "
        "bookkeeping. 0 keeps none. The batches are the same for any size.",
    )
    min_per_class: int = Field(
        10,
        ge=1,
        description="The data gate refuses a dataset in which a class has fewer images (both splits together).",
    )
    max_class_share: float = Field(
        0.8,
        gt=0,
        le=1,
        description="The data gate refuses a dataset in which one class holds a larger share of the images.",
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


class VisionModelConfig(_Section):
    """The image classifier (data.modality image): a small CNN or ViT, and its training-time augmentation."""

    arch: Literal["cnn", "vit"] = Field(
        "cnn", description="cnn: conv-BN-ReLU stages and global pooling; vit: patches through transformer blocks."
    )
    widths: list[int] = Field(
        [32, 64, 128],
        min_length=1,
        description="cnn: channels of each stage; every stage after the first halves the resolution.",
    )
    blocks_per_stage: int = Field(1, ge=1, description="cnn: conv-BN-ReLU blocks in each stage.")
    patch_size: int = Field(4, ge=1, description="vit: side in pixels of a patch; image.size must be a multiple.")
    n_layer: int = Field(4, ge=1, description="vit: transformer blocks.")
    n_head: int = Field(4, ge=1, description="vit: attention heads per block; must divide n_embd.")
    n_embd: int = Field(128, ge=8, description="vit: width of each patch's vector.")
    pooling: Literal["cls", "mean"] = Field(
        "cls", description="vit: classify from a class token (cls) or the mean of the patches' vectors (mean)."
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout before the head (and in the vit's blocks).")
    crop_padding: int = Field(
        2, ge=0, description="Augmentation: each training image is a random crop of it padded by this many pixels."
    )
    translate: float = Field(
        0.0, ge=0, lt=0.5, description="Augmentation: a further random shift of up to this share of the side."
    )
    flip: bool = Field(
        False, description="Augmentation: mirror half the training images (off: a mirrored digit is another symbol)."
    )

    @model_validator(mode="after")
    def _checks(self) -> VisionModelConfig:
        if any(width < 1 for width in self.widths):
            raise ValueError(f"vision.widths must be positive: {self.widths}")
        if self.arch == "vit" and self.n_embd % self.n_head:
            raise ValueError(f"vision.n_embd ({self.n_embd}) must be a multiple of vision.n_head ({self.n_head})")
        return self

    def misfit(self, config: Any) -> str | None:
        """What keeps this classifier from taking the images `config.image` fits (asked in a run that trains it,
        `foundry.core.registrations.sections_read`); None when nothing does. A ViT cuts the image into whole
        patches."""
        image = config.image
        if self.arch != "vit" or not image.size % self.patch_size:
            return None
        return f"image.size ({image.size}) must be a multiple of vision.patch_size ({self.patch_size})"

    def classifier_args(self, num_classes: int, in_channels: int, image_size: int) -> dict[str, Any]:
        """`models.vision.VisionConfig`'s arguments: these settings and what the dataset decides."""
        shape = {"num_classes": num_classes, "in_channels": in_channels, "image_size": image_size}
        return {**self.model_dump(exclude={"crop_padding", "translate", "flip"}), **shape}

    def augment_args(self) -> dict[str, Any]:
        """`models.vision.AugmentConfig`'s arguments."""
        return self.model_dump(include={"crop_padding", "translate", "flip"})
