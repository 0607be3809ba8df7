"""Image sources every install has offline: `sklearn://digits`, scikit-learn's 1,797 8x8 handwritten digits.

scikit-learn ships them inside its package (`load_digits` reads a bundled file, no download). They are
written once as a class-per-subfolder folder of PNGs (`<digit>/<index>.png`, 0-16 ink scaled to 0-255)
under `$FOUNDRY_HOME/sources/sklearn/`, named by the digest of the array, so every acquire reads the
same bytes and a changed bundle gives a new folder.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from PIL import Image

from foundry.data.archives import remove_partial
from foundry.data.remote import SourceError, locked

SCHEME = "sklearn://"
DATASETS = ("digits",)
_DONE = ".complete"


def is_builtin(source: str) -> bool:
    return source.startswith(SCHEME)


def digits_array() -> tuple[np.ndarray, np.ndarray]:
    """(1797, 8, 8) uint8 in 0-255 and (1797,) int labels, from scikit-learn's bundled copy."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    pixels = np.round(bunch.images * 255 / 16).astype(np.uint8)
    return pixels, bunch.target.astype(int)


def _write_digits(folder: Path, pixels: np.ndarray, labels: np.ndarray) -> None:
    for index, (image, label) in enumerate(zip(pixels, labels)):
        target = folder / str(label) / f"{index:04d}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image, mode="L").save(target, format="PNG", compress_level=9)


def materialise(source: str, cache: Path) -> Path:
    """The builtin `source` as a class-per-subfolder folder under `cache` (written on first use)."""
    name = source.removeprefix(SCHEME).strip("/")
    if name not in DATASETS:
        raise SourceError(f"data.source {source!r}: no such builtin image set (there is {', '.join(DATASETS)})")
    pixels, labels = digits_array()
    digest = hashlib.sha256(pixels.tobytes() + labels.astype("<i8").tobytes()).hexdigest()[:16]
    folder = cache / "sklearn" / f"{name}-{digest}"
    with locked(folder):
        if not (folder / _DONE).exists():
            tmp = folder.with_name(folder.name + ".writing")
            remove_partial(tmp)
            _write_digits(tmp, pixels, labels)
            remove_partial(folder)
            tmp.rename(folder)
            (folder / _DONE).write_text("")
    return folder
