"""Decode one image, note the metadata it carried, and fit its pixels to the configured size.

Only the pixels leave this module: the staged PNG is written from a fresh array, so no EXIF, ICC profile,
XMP or text chunk can travel with it. What the source carried is counted per kind (GPS positions and
camera serials are personal data) before it is dropped. The EXIF orientation is applied first, so a
photo is staged the way it is seen. Orienting, colouring and fitting are `models.image_input`'s, which serving
runs on a request's bytes: one code for both, so a served image has the pixels its model was trained on.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image

from foundry.vision.config import ImageConfig
from models.image_input import FORMATS, coloured, fitted, upright

GPS_IFD, EXIF_IFD = 0x8825, 0x8769
SERIAL_TAGS = {0xA431, 0xA435, 0xC62F}  # BodySerialNumber, LensSerialNumber, CameraSerialNumber (DNG)
METADATA_KINDS = ("gps", "camera_serial", "exif", "icc_profile", "xmp", "iptc", "comment")
_TEXT_INFO = {"comment", "Comment", "Description", "Title", "Author", "Software", "Copyright"}


class UndecodableImage(ValueError):
    """The bytes are not an image Foundry reads (corrupt, truncated, another format, too large)."""


@dataclass(frozen=True)
class Decoded:
    """An image after the size policy: its pixels (H, W) or (H, W, 3) uint8, their hash, and what was stripped."""

    pixels: np.ndarray
    sha256: str  # of the shape and the pixels: the image's identity in the table and the ledger
    metadata: tuple[str, ...]  # METADATA_KINDS the source file carried

    @property
    def channels(self) -> int:
        return 1 if self.pixels.ndim == 2 else self.pixels.shape[2]

    def image(self) -> Image.Image:
        return Image.fromarray(self.pixels)

    def png(self, image: Image.Image | None = None) -> bytes:
        """Lossless, metadata-free PNG bytes, the same for the same pixels (`image`: `self.image()`, made already)."""
        out = io.BytesIO()
        (image or self.image()).save(out, format="PNG", compress_level=6)
        return out.getvalue()


def metadata_kinds(image: Image.Image) -> tuple[str, ...]:
    """Which kinds of metadata the file carried (each counted once per image)."""
    exif = image.getexif()
    found = set()
    if exif.get_ifd(GPS_IFD):
        found.add("gps")
    tags = {tag for tag in exif if tag not in (GPS_IFD, EXIF_IFD)} | set(exif.get_ifd(EXIF_IFD))
    if tags & SERIAL_TAGS:
        found.add("camera_serial")
    if tags - SERIAL_TAGS:
        found.add("exif")
    info = image.info
    if info.get("icc_profile"):
        found.add("icc_profile")
    if info.get("xmp") or info.get("XML:com.adobe.xmp"):
        found.add("xmp")
    if info.get("photoshop"):  # JPEG APP13: IPTC captions, bylines, locations
        found.add("iptc")
    if _TEXT_INFO & set(info) or getattr(image, "text", None):
        found.add("comment")
    return tuple(kind for kind in METADATA_KINDS if kind in found)


def _open(path: Path | BinaryIO, cfg: ImageConfig) -> Image.Image:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path, formats=FORMATS)
            if image.width * image.height > cfg.max_pixels:  # from the header alone, before any pixel is decoded
                raise UndecodableImage(
                    f"{image.width}x{image.height} pixels, more than image.max_pixels ({cfg.max_pixels})"
                )
            image.load()  # a truncated or corrupt file fails here, not later in the shard writer
            return image
    except UndecodableImage:
        raise
    except (
        OSError,
        SyntaxError,
        ValueError,
        EOFError,
        Image.DecompressionBombError,
        Image.DecompressionBombWarning,
    ) as exc:
        raise UndecodableImage(f"{type(exc).__name__}: {exc}") from None


def pixel_sha256(pixels: np.ndarray) -> str:
    shape = "x".join(str(n) for n in pixels.shape)
    return hashlib.sha256(shape.encode() + b":" + np.ascontiguousarray(pixels).tobytes()).hexdigest()


def decode(path: Path | BinaryIO, cfg: ImageConfig) -> Decoded:
    """The image at `path` (or in a file object already read), oriented, coloured and fitted;
    `UndecodableImage` when it cannot be read."""
    with _open(path, cfg) as image:
        kinds = metadata_kinds(image)
        fixed = upright(image)
    pixels = np.array(fitted(coloured(fixed, cfg.channels), cfg.size, cfg.mode), dtype=np.uint8)
    return Decoded(pixels, pixel_sha256(pixels), kinds)
