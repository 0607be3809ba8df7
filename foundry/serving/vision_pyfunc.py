"""A registered image classifier: images in, a label and every class's probability out, through
`mlflow.pyfunc.load_model`.

A leaf, like `pyfunc_model.py`: this file and the `models` package are the model's code, copied into every
version (`code_paths`), so a version loads wherever its logged requirements (torch, pillow, numpy, pandas,
mlflow) are installed, with no Foundry checkout. Import nothing else here.

Each row's `image` is the image file's bytes, the same bytes base64-encoded (a string), or, in-process only, an
`os.PathLike` path of the file (a JSON request cannot carry one, so the scoring server never opens a file of its
own disk for a caller). In-process, `{"image": [...]}` and a list of `{"image": ...}` are rows too (MLflow
makes them a DataFrame first). Each image is decoded and fitted exactly as the
data stage staged the training images (`models.image_input`, with the size, mode and channels saved in
`model.pt`). A request is checked first, against the limits saved with the version (its `model_config`): rows,
bytes per image (a base64 text from its length, before it is decoded), then, from every image's header before any
is decoded, pixels per image, the long side over the short one and the pixels of the whole request; a refusal is an
`MlflowException` of INVALID_PARAMETER_VALUE (HTTP 400) naming the row and the limit, its `param` the request's field
at fault (`image`: every refusal is about the images), which `foundry serve-model` answers in OpenAI's error shape.
"""

import base64
import binascii
import os

import mlflow.pyfunc
import numpy as np
import pandas as pd
import torch
from mlflow.exceptions import MlflowException
from mlflow.models import set_model

from models.image_input import NotAnImage, image_size, pixels
from models.request_limits import IMAGE_LIMITS, base64_chars, saved_limits
from models.vision import classifier_from_saved

PARAM = "image"  # the one column a request holds: the field every refusal names


def refused(message: str) -> MlflowException:
    refusal = MlflowException.invalid_parameter_value(message)
    refusal.param = PARAM  # read by `foundry serve-model` (foundry/serving/http.py); MLflow's own server ignores it
    return refusal


def image_values(model_input) -> list:
    """The request's images, one per row: a DataFrame's `image` column, or a list (or Series) of images."""
    if isinstance(model_input, pd.DataFrame):
        if "image" not in model_input.columns:
            raise refused(f"rows need an `image` column (bytes, base64 or a path); got {list(model_input.columns)}")
        return list(model_input["image"])
    if isinstance(model_input, pd.Series | list | tuple):
        return list(model_input)
    raise refused(
        f"the input must be rows with an `image` column or a list of images, not {type(model_input).__name__}"
    )


def image_bytes(row: int, value, max_bytes: int) -> bytes:
    """A row's image file bytes: given, base64-decoded, or read from a path; within `max_bytes`."""
    where = f"row {row}: image"
    if isinstance(value, os.PathLike):
        try:
            size = os.path.getsize(value)
        except OSError as exc:
            raise refused(f"{where}: cannot read {os.fspath(value)!r}: {exc.strerror}") from None
        if size > max_bytes:
            raise refused(f"{where}: {size} bytes; this version takes images of at most {max_bytes} bytes")
        with open(value, "rb") as file:
            return file.read()
    if isinstance(value, str):
        if len(value) > base64_chars(max_bytes):  # refused before anything is decoded
            raise refused(
                f"{where}: {len(value)} base64 characters; this version takes images of at most {max_bytes} bytes"
            )
        try:
            value = base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError):
            raise refused(f"{where}: a string must be the image's bytes in base64; this one is not") from None
    if not isinstance(value, bytes | bytearray | memoryview):
        raise refused(f"{where}: bytes, a base64 string or a path, not {type(value).__name__}")
    if len(value) > max_bytes:
        raise refused(f"{where}: {len(value)} bytes; this version takes images of at most {max_bytes} bytes")
    return bytes(value)


def header_size(row: int, data: bytes) -> tuple[int, int]:
    try:
        return image_size(data)
    except NotAnImage as exc:
        raise refused(f"row {row}: image: {exc}") from None


def check_sizes(sizes: list[tuple[int, int]], limits: dict[str, int]) -> None:
    """The images' sizes (from their headers: nothing is decoded yet) within the version's limits: pixels per image,
    long side over short side, pixels of the whole request."""
    for row, (width, height) in enumerate(sizes):
        if width * height > limits["max_pixels"]:
            raise refused(f"row {row}: image: {width}x{height} pixels, more than the {limits['max_pixels']} allowed")
        if max(width, height) > limits["max_aspect_ratio"] * min(width, height):
            raise refused(
                f"row {row}: image: {width}x{height} pixels, one side more than {limits['max_aspect_ratio']} times "
                f"the other (max_aspect_ratio)"
            )
    total = sum(width * height for width, height in sizes)
    if total > limits["max_request_pixels"]:
        raise refused(
            f"rows: the images hold {total} pixels together; a request to this version holds at most "
            f"{limits['max_request_pixels']} (max_request_pixels)"
        )


class ImageClassifierModel(mlflow.pyfunc.PythonModel):
    """Loads the `checkpoint` artifact (model.pt of an image classifier); classifies on CPU."""

    def load_context(self, context) -> None:
        saved = torch.load(context.artifacts["checkpoint"], map_location="cpu", weights_only=True)
        self.model = classifier_from_saved(saved)
        self.classes = list(saved["classes"])
        image, in_channels = saved["image"], saved["model_args"].get("in_channels", 1)
        channels = image.get("channels", "auto")
        # `auto` staged every training image with the channels the model takes: a request gets the same.
        self.channels = channels if channels != "auto" else ("gray" if in_channels == 1 else "rgb")
        self.size, self.mode = int(image["size"]), image.get("mode", "resize")
        self.limits = saved_limits(getattr(context, "model_config", None), IMAGE_LIMITS)

    def batch(self, model_input) -> torch.Tensor:
        """The request's images as the uint8 batch (B, C, H, W) training fed the model, every row checked."""
        values, limits = image_values(model_input), self.limits
        if not values:
            raise refused("rows: no images; send 1 or more")
        if len(values) > limits["max_rows"]:
            raise refused(
                f"rows: {len(values)} images; a request holds 1 to {limits['max_rows']}, this version's limit"
            )
        datas = [image_bytes(row, value, limits["max_image_bytes"]) for row, value in enumerate(values)]
        check_sizes([header_size(row, data) for row, data in enumerate(datas)], limits)
        images = []
        for row, data in enumerate(datas):
            try:
                images.append(pixels(data, self.size, self.mode, self.channels, limits["max_pixels"]))
            except NotAnImage as exc:
                raise refused(f"row {row}: image: {exc}") from None
        return torch.from_numpy(np.stack(images))

    # Hinted as a DataFrame, which MLflow does not infer from: the explicit signature applies.
    @torch.no_grad()
    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        logits, _ = self.model(self.batch(model_input))
        probabilities = torch.softmax(logits.float(), dim=1).numpy()
        return pd.DataFrame(
            {
                "label": [self.classes[i] for i in probabilities.argmax(axis=1)],
                "probability": probabilities.max(axis=1).astype(float),
                "probabilities": [dict(zip(self.classes, map(float, p), strict=True)) for p in probabilities],
            }
        )


# MLflow runs this file to load a version: it takes the model from here.
set_model(ImageClassifierModel())
