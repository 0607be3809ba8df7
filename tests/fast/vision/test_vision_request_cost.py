"""A served image classifier's request costs what its limits allow (#57 point 2), through a real HTTP server on
loopback (uvicorn running `foundry serve-model`'s `build_app`): pixels per image, the long side over the short one and
the pixels of the whole request are read from the headers before any image is decoded (an image whose data is cut
off after its header is refused for its size, not for its data); a base64 text longer than the largest image's is
refused before MLflow decodes it, and a 300 MB one from the body's length, before it is read. Each refusal in OpenAI's
error shape, its `param` the `image` field."""

from __future__ import annotations

import base64
import http.client
import io
import resource
import time
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest
from helpers_images import brightness_classifier
from helpers_serving import served
from PIL import Image

from foundry.vision.package import vision_model_kwargs
from models.request_limits import MAX_BODY_BYTES, base64_chars

SIDE = 48
LIMITS = {
    "max_rows": 4,
    "max_image_bytes": 8000,
    "max_pixels": SIDE * SIDE,
    "max_request_pixels": 2 * SIDE * SIDE,
    "max_aspect_ratio": 4,
}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    import mlflow

    folder = tmp_path_factory.mktemp("vision-cost")
    mlflow.pyfunc.save_model(
        str(folder / "model"), **vision_model_kwargs(brightness_classifier(folder / "model.pt"), LIMITS)
    )
    with served(mlflow.pyfunc.load_model(str(folder / "model")), "vision") as url:
        yield url


def png(width: int, height: int, cut: bool = False) -> bytes:
    """A noisy gray PNG; `cut`: its pixel data cut off halfway, the header whole (it cannot be decoded)."""
    pixels = np.random.default_rng(width * height).integers(0, 256, (height, width), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(out, format="PNG")
    data = out.getvalue()
    data_at = data.index(b"IDAT")
    return data[: data_at + (len(data) - data_at) // 2] if cut else data


def _error(answer: httpx.Response) -> dict:
    """A 400 in OpenAI's error shape naming the `image` field, as every refusal of this route (the body's checks and
    the model's own alike); its error."""
    assert answer.status_code == 400, answer.text[:300]
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and "Traceback" not in answer.text, error
    assert (error["type"], error["param"]) == ("invalid_request_error", "image"), error
    return error


def _refusal(url: str, images: list[bytes]) -> str:
    rows = [{"image": base64.b64encode(image).decode()} for image in images]
    answer = httpx.post(f"{url}/invocations", json={"dataframe_records": rows}, timeout=60)
    return _error(answer)["message"]


def test_images_within_the_limits_are_classified(url):
    rows = [{"image": base64.b64encode(png(SIDE, SIDE)).decode()}, {"image": base64.b64encode(png(40, 10)).decode()}]
    answer = httpx.post(f"{url}/invocations", json={"dataframe_records": rows}, timeout=60)
    assert answer.status_code == 200 and len(answer.json()["predictions"]) == 2, answer.text[:300]


def test_an_image_cut_after_its_header_is_refused_when_decoded():
    """The control for the tests below: the cut images cannot be decoded."""
    from models.image_input import NotAnImage, pixels

    with pytest.raises(NotAnImage):
        pixels(png(SIDE, SIDE, cut=True), 8, "resize", "gray", SIDE * SIDE)


def test_a_cut_image_within_the_limits_is_refused_for_its_data(url):
    assert "not a JPEG, PNG, WEBP, BMP image Pillow can decode" in _refusal(url, [png(SIDE, SIDE, cut=True)])


@pytest.mark.parametrize(
    ("images", "named"),
    [
        ([png(40, 4, cut=True)], "row 0: image: 40x4 pixels, one side more than 4 times the other (max_aspect_ratio)"),
        ([png(SIDE, SIDE), png(2, 40, cut=True)], "row 1: image: 2x40 pixels, one side more than 4 times"),
        ([png(SIDE + 1, SIDE, cut=True)], f"row 0: image: {SIDE + 1}x{SIDE} pixels, more than the {SIDE * SIDE}"),
        (
            [png(SIDE, SIDE), png(SIDE, SIDE), png(SIDE, SIDE, cut=True)],
            f"rows: the images hold {3 * SIDE * SIDE} pixels together; a request to this version holds at most "
            f"{2 * SIDE * SIDE} (max_request_pixels)",
        ),
    ],
)
def test_sizes_are_refused_from_the_headers_before_any_image_is_decoded(url, images, named):
    assert named in _refusal(url, images)


def test_a_base64_text_longer_than_the_largest_image_is_refused_before_it_is_decoded(url):
    text = "A" * (base64_chars(LIMITS["max_image_bytes"]) + 4)
    answer = httpx.post(f"{url}/invocations", json={"dataframe_records": [{"image": text}]}, timeout=60)
    message = _error(answer)["message"]
    assert message.startswith(f"image: a text of {len(text)} characters") and "before it is decoded" in message


def test_a_300_mb_base64_image_is_refused_from_its_length_unread(url):
    """Declared 300 MB: 413 before the body is read (MLflow's own server decoded it: 3.9 GB)."""
    size = 300 * 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    address = urlparse(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    started = time.monotonic()
    connection.putrequest("POST", "/invocations")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(size))
    connection.endheaders(b'{"dataframe_records": [{"image": "' + b"A" * 2**16)
    answer = connection.getresponse()
    body, elapsed = answer.read(), time.monotonic() - started
    connection.close()
    assert answer.status == 413 and b"(Content-Length)" in body and str(MAX_BODY_BYTES).encode() in body, body
    assert elapsed < 1.0, f"{elapsed:.2f} s"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 100 * 2**10  # under 100 MiB more
