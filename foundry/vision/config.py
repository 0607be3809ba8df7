"""The `image` settings of the vision data stage, now the `image` section of `foundry.config` (re-exported here)."""

from foundry.config.image import IMAGE_EXTENSIONS, INDEX_EXTENSIONS, ImageConfig

__all__ = ["IMAGE_EXTENSIONS", "INDEX_EXTENSIONS", "ImageConfig"]
