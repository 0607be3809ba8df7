"""The served image classifier (`foundry/serving/vision_pyfunc.py`): saved with `mlflow.pyfunc.save_model` and
loaded with `mlflow.pyfunc.load_model` in this process; bytes, base64 and paths alike; bounded requests; the
same pixels as the data stage staged."""

from __future__ import annotations

import ast
import base64
import io

import numpy as np
import pandas as pd
import pytest
from conftest import REPO_ROOT
from helpers_images import BRIGHTNESS, brightness_classifier, gray_png
from mlflow.exceptions import MlflowException
from PIL import Image

from foundry.vision.package import vision_model_kwargs
from models.image_input import pixels

LIMITS = {"max_rows": 4, "max_image_bytes": 2000, "max_pixels": 32 * 32}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    import mlflow

    folder = tmp_path_factory.mktemp("served")
    checkpoint = brightness_classifier(folder / "model.pt")
    mlflow.pyfunc.save_model(str(folder / "model"), **vision_model_kwargs(checkpoint, LIMITS))
    return mlflow.pyfunc.load_model(str(folder / "model"))


def png_bytes(image: Image.Image, format: str = "PNG") -> bytes:
    out = io.BytesIO()
    image.save(out, format=format)
    return out.getvalue()


def test_bytes_base64_and_paths_are_one_image(served, tmp_path):
    path = gray_png(tmp_path / "bright.png", BRIGHTNESS["bright"], seed=7)
    data = path.read_bytes()
    ways = [data, base64.b64encode(data).decode(), base64.encodebytes(data).decode(), path]
    out = served.predict(pd.DataFrame({"image": ways}))
    assert out["label"].tolist() == ["bright"] * 4
    assert all(p == out["probabilities"][0] for p in out["probabilities"])
    assert list(out["probabilities"][0]) == list(BRIGHTNESS)
    assert sum(out["probabilities"][0].values()) == pytest.approx(1.0)
    assert out["probability"][0] == max(out["probabilities"][0].values())


def test_a_list_of_images_is_rows(served, tmp_path):
    images = [gray_png(tmp_path / f"{label}.png", level, seed=1).read_bytes() for label, level in BRIGHTNESS.items()]
    assert served.predict(pd.DataFrame({"image": images}))["label"].tolist() == list(BRIGHTNESS)
    assert served.predict({"image": images})["label"].tolist() == list(BRIGHTNESS)
    assert served.predict([{"image": image} for image in images])["label"].tolist() == list(BRIGHTNESS)


def test_a_colour_image_of_another_size_is_fitted_as_training_fitted_it(served):
    bright = Image.new("RGB", (20, 12), (250, 240, 245))
    assert served.predict(pd.DataFrame({"image": [png_bytes(bright, "JPEG")]}))["label"][0] == "bright"


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (b"GIF89a not really", "row 0: image: not a JPEG, PNG, WEBP, BMP image"),
        ("not base64!", "row 0: image: a string must be the image's bytes in base64"),
        (np.random.default_rng(0).bytes(3000), "row 0: image: 3000 bytes; this version takes images of at most 2000"),
        ("A" * 4000, "row 0: image: 4000 base64 characters; this version takes images of at most 2000 bytes"),
        (png_bytes(Image.new("L", (40, 40))), "row 0: image: 40x40 pixels, more than the 1024 allowed"),
        ([1, 2], "row 0: image: bytes, a base64 string or a path, not list"),
    ],
)
def test_an_image_it_cannot_take_is_refused_by_name(served, image, message):
    with pytest.raises(MlflowException, match="^" + message.replace("(", r"\(")) as refused:
        served.predict(pd.DataFrame({"image": [image]}))
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE"


def test_more_rows_than_the_limit_are_refused(served, tmp_path):
    data = gray_png(tmp_path / "x.png", 10, seed=1).read_bytes()
    with pytest.raises(MlflowException, match="rows: 5 images; a request holds 1 to 4"):
        served.predict(pd.DataFrame({"image": [data] * 5}))


def test_a_missing_file_is_refused(served, tmp_path):
    with pytest.raises(MlflowException, match="row 0: image: cannot read"):
        served.predict(pd.DataFrame({"image": [tmp_path / "missing.png"]}))


@pytest.mark.parametrize("mode", ["resize", "center_crop", "pad"])
@pytest.mark.parametrize("channels", ["auto", "gray", "rgb"])
def test_requests_get_the_pixels_the_data_stage_staged(tmp_path, mode, channels):
    from foundry.vision.config import ImageConfig
    from foundry.vision.decode import decode

    rng = np.random.default_rng(5)
    photo = Image.fromarray(rng.integers(0, 256, (30, 50, 3), dtype=np.uint8))
    exif = photo.getexif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees to be upright
    path = tmp_path / "photo.jpg"
    photo.save(path, format="JPEG", exif=exif)
    staged = decode(path, ImageConfig(size=16, mode=mode, channels=channels)).pixels
    served = pixels(path.read_bytes(), 16, mode, channels, 10**6)
    expected = staged[None] if staged.ndim == 2 else staged.transpose(2, 0, 1)
    assert np.array_equal(served, expected)


def test_the_served_classifier_is_a_leaf():
    tree = ast.parse((REPO_ROOT / "foundry" / "serving" / "vision_pyfunc.py").read_text())
    roots = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert roots <= {"models", "mlflow", "pandas", "numpy", "torch", "base64", "binascii", "os"}, roots
