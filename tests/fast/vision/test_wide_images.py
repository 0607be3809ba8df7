"""16-bit grayscale PNGs (#55, point 9): scaled to 8 bits, not clipped, in the data stage and in the served
classifier alike, through `decode()` and `predict()` and through the entry points: `foundry prepare` on an image
folder and a POST to a served classifier's `/invocations`. Pillow's own `convert("L")` clips, so a full-range
gradient came out 97% white and a dark 16-bit image was served as "bright"."""

from __future__ import annotations

import base64
import io
import tarfile

import httpx
import numpy as np
import pandas as pd
import pytest
from conftest import REPO_ROOT
from helpers_images import BRIGHTNESS, brightness_classifier
from helpers_serving import served
from PIL import Image

from foundry.cli import main
from foundry.vision.config import ImageConfig
from foundry.vision.decode import decode
from foundry.vision.package import vision_model_kwargs

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)

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


def monotone(pixels: np.ndarray) -> bool:
    return bool(np.all(np.diff(pixels.astype(int), axis=1) >= 0))


def test_foundry_prepare_stages_a_16_bit_gradient_as_a_gradient(tmp_path, capsys):
    """An image folder of two classes of 8-bit noise, one class also holding a 16-bit gradient, through `foundry
    acquire` and `foundry prepare`: the gradient's staged image (found in the shards as the one whose rows all
    rise) spans 0 to 255 with a few pixels at 255, not 97% of them."""
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (tmp_path / "src" / label).mkdir(parents=True)
        for n in range(12):
            noise = rng.integers(0, 256, (32, 32), dtype=np.uint8)
            Image.fromarray(noise, mode="L").save(tmp_path / "src" / label / f"{n}.png")
    (tmp_path / "src" / "a" / "gradient.png").write_bytes(wide_png(np.tile(np.linspace(0, 65535, 32), (32, 1))))
    common = ["--config", str(REPO_ROOT / "configs" / "tiny.yaml"), "--set", f"data.source={tmp_path / 'src'}"]
    common += ["--set", "data.modality=image", "--set", "image.size=32", "--set", "image.channels=gray"]
    manifest, out = tmp_path / "source_manifest.json", tmp_path / "prepared"
    assert main(["acquire", *common, "--out", str(manifest)]) == 0, capsys.readouterr().err
    assert main(["prepare", *common, "--manifest", str(manifest), "--out", str(out)]) == 0, capsys.readouterr().err

    staged = []
    for shard in sorted(out.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in (m for m in tar if m.name.endswith(".png")):
                staged.append(np.asarray(Image.open(io.BytesIO(tar.extractfile(member).read()))))
    assert len(staged) == 25
    (gradient,) = [pixels for pixels in staged if monotone(pixels)]
    assert gradient.min() == 0 and gradient.max() == 255
    assert (gradient == 255).mean() < 0.05  # clipped, 97% of it was 255
    assert np.abs(gradient[0].astype(int) - np.round(np.linspace(0, 255, 32))).max() <= 1


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    import mlflow

    folder = tmp_path_factory.mktemp("wide-served")
    limits = {"max_rows": 4, "max_image_bytes": 4000, "max_pixels": 32 * 32}
    mlflow.pyfunc.save_model(
        str(folder / "model"), **vision_model_kwargs(brightness_classifier(folder / "m.pt"), limits)
    )
    with served(mlflow.pyfunc.load_model(str(folder / "model")), "vision") as url:
        yield url


def test_a_16_bit_png_posted_to_invocations_is_classified_at_its_level(url):
    """Each level's 16-bit image, base64 in one request to the served route: each answered with its own label."""
    rows = [
        {"image": base64.b64encode(wide_png(np.full((8, 8), level * WIDE))).decode()} for level in BRIGHTNESS.values()
    ]
    answer = httpx.post(f"{url}/invocations", json={"dataframe_records": rows}, timeout=60)
    assert answer.status_code == 200, answer.text[:300]
    assert [p["label"] for p in answer.json()["predictions"]] == list(BRIGHTNESS)
