"""One image as a classifier takes it: decoded, upright, coloured and fitted to the size it was trained at.

The same steps, in the same order, as the vision data stage (`foundry.vision.decode`): Pillow restricted to
JPEG, PNG, WebP and BMP, the size read from the header before any pixel is decoded, the EXIF orientation
applied, grayscale or RGB, then resize, center_crop or pad to size x size with bicubic resampling. Training
reads the staged pixels; serving runs these steps on a request's bytes, so both see the same pixels.
No torch here, no paths: bytes in, a uint8 array out.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageOps

FORMATS = ["JPEG", "PNG", "WEBP", "BMP"]  # the only decoders Pillow may try: nothing exotic parses untrusted bytes
GRAY_MODES = {"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F"}
WIDE_GRAY_MODES = {"I", "I;16", "I;16B", "I;16L"}  # 16-bit samples: scaled to 8 bits, not clipped
MODES = ("resize", "center_crop", "pad")


class NotAnImage(ValueError):
    """The bytes are not an image this model reads (corrupt, truncated, another format, too large)."""


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the image's header, no pixel decoded; `NotAnImage` naming why not."""
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as image:
            return image.size
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError):
        raise NotAnImage(f"not a {', '.join(FORMATS)} image Pillow can decode") from None
    except Image.DecompressionBombWarning:  # only when warnings are errors: the size is still the header's
        raise NotAnImage("more pixels than Pillow decodes safely") from None


def open_image(data: bytes, max_pixels: int) -> Image.Image:
    """The decoded image; `NotAnImage` naming why not. Its size is checked from the header, before decoding."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)
            if image.width * image.height > max_pixels:
                raise NotAnImage(f"{image.width}x{image.height} pixels, more than the {max_pixels} allowed")
            image.load()
            return image
    except NotAnImage:
        raise
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise NotAnImage(f"not a {', '.join(FORMATS)} image Pillow can decode") from None


def upright(image: Image.Image) -> Image.Image:
    try:
        return ImageOps.exif_transpose(image)
    except (OSError, ValueError, SyntaxError):  # a broken EXIF block: the pixels as stored
        return image.copy()


def colourless(image: Image.Image) -> bool:
    # One level of tolerance: lossy WebP rounds a gray picture's chroma to +-1.
    colours = np.asarray(image.convert("RGB"), dtype=np.int16)
    return bool(np.abs(colours - colours[..., :1]).max(initial=0) <= 1)


def eight_bit(image: Image.Image) -> Image.Image:
    """A 16-bit grayscale image (PNG's "I;16", or "I" as older Pillow opens it) scaled to 8 bits; Pillow's own
    `convert("L")` clips instead, so everything above 255 of 65,535 would turn white. Other modes as they are."""
    if image.mode not in WIDE_GRAY_MODES:
        return image
    wide = np.clip(np.asarray(image, dtype=np.int64), 0, 65535)
    return Image.fromarray(((wide * 255 + 32767) // 65535).astype(np.uint8), mode="L")


def coloured(image: Image.Image, channels: str) -> Image.Image:
    """gray, rgb, or auto: gray for a grayscale image (equal channels count as gray), else RGB."""
    image = eight_bit(image)
    if channels != "auto":  # colourless() reads every pixel: only auto asks it
        return image.convert("L" if channels == "gray" else "RGB")
    gray = image.mode in GRAY_MODES or (image.mode in ("P", "RGB") and colourless(image))
    return image.convert("L" if gray else "RGB")


def fitted(image: Image.Image, size: int, mode: str) -> Image.Image:
    """The image at size x size: stretched (resize), its middle cut (center_crop) or bordered in black (pad)."""
    box = (size, size)
    if mode == "resize":
        return image.resize(box, Image.Resampling.BICUBIC)
    if mode == "center_crop":
        return ImageOps.fit(image, box, Image.Resampling.BICUBIC, centering=(0.5, 0.5))
    if mode == "pad":
        return ImageOps.pad(image, box, Image.Resampling.BICUBIC, color=0)
    raise ValueError(f"image mode {mode!r}: one of {', '.join(MODES)}")


def pixels(data: bytes, size: int, mode: str, channels: str, max_pixels: int) -> np.ndarray:
    """Image bytes to uint8 (C, H, W) as the model was trained on: `channels` "gray" gives C=1, "rgb" C=3."""
    image = open_image(data, max_pixels)
    with image:
        fixed = upright(image)
    array = np.array(fitted(coloured(fixed, channels), size, mode), dtype=np.uint8)
    return array[None] if array.ndim == 2 else np.ascontiguousarray(array.transpose(2, 0, 1))
