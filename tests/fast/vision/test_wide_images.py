"""16-bit grayscale PNGs (#55, point 9): scaled to 8 bits, not clipped, in the data stage and in the served
classifier alike. Pillow's own `convert("L")` clips, so a full-range gradient came out 97% white and a dark
16-bit image was served as "bright"."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from helpers_images import BRIGHTNESS, brightness_classifier
from PIL import Image

from foundry.vision.config import ImageConfig
from foundry.vision.decode import decode
from foundry.vision.package import vision_model_kwargs

WIDE = 257  # 8-bit level x 257 = the same level on 16 bits (255 -> 65,535)


def wide_png(levels: np.ndarray) -> bytes:
    image = Image.fromarray(levels.astype(np.uint16))
    out = io.BytesIO()
    image.save(out, format="PNG")
    assert Image.open(io.BytesIO(out.getvalue())).mode == "I;16"  # what the test means to send
    return out.getvalue()


def test_a_16_bit_gradient_is_staged_as_a_gradient(tmp_path):
    gradient = np.tile(np.linspace(0, 65535, 64), (64, 1))
    path = tmp_path / "gradient.png"
    path.write_bytes(wide_png(gradient))
    staged = decode(path, ImageConfig(size=64, mode="resize", channels="gray")).pixels
    assert staged.min() == 0 and staged.max() == 255
    assert (staged == 255).mean() < 0.05  # clipped, 97% of it was 255
    assert np.all(np.diff(staged[0].astype(int)) >= 0)  # still a gradient, left to right
    assert np.abs(staged[0].astype(int) - np.round(np.linspace(0, 255, 64))).max() <= 1


@pytest.mark.parametrize("label", list(BRIGHTNESS))
def test_the_served_classifier_sees_a_16_bit_image_at_its_level(tmp_path, label):
    import mlflow

    checkpoint = brightness_classifier(tmp_path / "model.pt")
    limits = {"max_rows": 4, "max_image_bytes": 4000, "max_pixels": 32 * 32}
    mlflow.pyfunc.save_model(str(tmp_path / "model"), **vision_model_kwargs(checkpoint, limits))
    served = mlflow.pyfunc.load_model(str(tmp_path / "model"))
    image = wide_png(np.full((8, 8), BRIGHTNESS[label] * WIDE))
    assert served.predict(pd.DataFrame({"image": [image]}))["label"].tolist() == [label]
