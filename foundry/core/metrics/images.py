"""An image classifier's scores on a holdout, as one typed value, and the pure functions that compute them.

`VisionMetrics` is to images what `foundry.core.metrics.holdout.HoldoutMetrics` is to text: logged as
`holdout/<field>` metrics on the run (`as_mlflow()`), read back by the gate (`from_mlflow()`). Its gate figure is
`accuracy`, higher is better; text's is bits per byte, lower is better.

The functions take plain arrays (class indices, pixel batches), so every figure can be checked on hand-made values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from foundry.core.metrics.baselines import PREFIX, BaselinedMetrics

CLASS_PREFIX = PREFIX + "class_accuracy/"  # not under holdout/accuracy/: a file store keeps each key as a file


class VisionMetrics(BaselinedMetrics):
    """Accuracy, macro F1, per-class accuracy and loss on the holdout, beside the baselines a model should beat."""

    accuracy: float  # share of holdout images classified right: what promotion compares
    macro_f1: float | None = None  # F1 per class, averaged with equal weight (a class never predicted: 0)
    loss: float | None = None  # mean cross-entropy, nats per image
    images: int | None = None  # holdout images scored
    majority_accuracy: float | None = None  # always the class with most training images
    nearest_class_mean_accuracy: float | None = None  # the class whose mean training image is nearest in pixels
    per_class_accuracy: dict[str, float] = {}  # label -> recall on that class's holdout images

    kind: ClassVar[str] = "vision"
    BASELINES: ClassVar[tuple[str, ...]] = ("majority", "nearest_class_mean")
    LABELS: ClassVar[dict[str, str]] = {"majority": "majority class", "nearest_class_mean": "nearest class mean"}
    COUNTS: ClassVar[tuple[str, ...]] = ("images",)
    COMPARED: ClassVar[tuple[str, ...]] = ("accuracy", "loss")
    GATE_FIGURE: ClassVar[str] = "accuracy"
    BASELINE_SUFFIX: ClassVar[str] = "_accuracy"
    HIGHER_IS_BETTER: ClassVar[bool] = True
    NOT_SCALAR: ClassVar[frozenset[str]] = frozenset({"per_class_accuracy"})  # one key per class instead

    def summary_rows(self) -> list[tuple[str, str]]:
        """What `foundry run`'s summary prints of them, (label, line) a row: the holdout and the baselines."""
        return [
            ("holdout", f"accuracy {self.accuracy:.4f}  macro F1 {self.macro_f1 or 0:.4f}  ({self.images} images)"),
            (
                "baselines",
                f"majority class {self.majority_accuracy or 0:.4f}  nearest class mean "
                f"{self.nearest_class_mean_accuracy or 0:.4f} accuracy",
            ),
        ]

    @staticmethod
    def class_key(label: str) -> str:
        """MLflow takes letters, digits and `_-. /` in a key: anything else in a label becomes `_`."""
        return CLASS_PREFIX + re.sub(r"[^\w\-. /]", "_", label)

    def as_mlflow(self) -> dict[str, float]:
        """The measured fields under their MLflow keys; each class's accuracy under `holdout/class_accuracy/<label>`."""
        return super().as_mlflow() | {self.class_key(label): float(v) for label, v in self.per_class_accuracy.items()}

    @classmethod
    def from_mlflow(cls, metrics: Mapping[str, float | str]) -> VisionMetrics:
        """From a run's metrics or a version's tags (values may be strings); other keys are ignored."""
        classes = {k.removeprefix(CLASS_PREFIX): float(v) for k, v in metrics.items() if k.startswith(CLASS_PREFIX)}
        return cls(**cls.recorded_scalars(metrics), per_class_accuracy=classes)


def confusion(targets: np.ndarray, predictions: np.ndarray, n_classes: int) -> np.ndarray:
    """(n_classes, n_classes) counts: row the true class, column the predicted one."""
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(targets, dtype=np.int64), np.asarray(predictions, dtype=np.int64)), 1)
    return matrix


def accuracy_of(matrix: np.ndarray) -> float:
    return float(np.trace(matrix) / max(matrix.sum(), 1))


def macro_f1(matrix: np.ndarray) -> float:
    """Mean F1 over the classes present in the holdout (a class with no holdout image has no recall to weigh)."""
    hits, truths, predicted = np.diag(matrix), matrix.sum(axis=1), matrix.sum(axis=0)
    present = truths > 0
    denominator = truths + predicted  # F1 = 2 tp / (2 tp + fp + fn) = 2 tp / (truths + predicted)
    f1 = np.divide(2 * hits, denominator, out=np.zeros(len(hits)), where=denominator > 0)
    return float(f1[present].mean()) if present.any() else 0.0


def per_class_accuracy(matrix: np.ndarray, classes: list[str]) -> dict[str, float]:
    """Recall of each class with holdout images, by label."""
    truths = matrix.sum(axis=1)
    return {label: float(matrix[i, i] / truths[i]) for i, label in enumerate(classes) if truths[i]}


def majority_accuracy(train_counts: Mapping[str, int], holdout_targets: np.ndarray, classes: list[str]) -> float:
    """Accuracy of always answering the class with most training images (ties: the first in class order)."""
    counts = [train_counts.get(label, 0) for label in classes]
    majority = int(np.argmax(counts))
    targets = np.asarray(holdout_targets)
    return float((targets == majority).mean()) if len(targets) else 0.0


class ClassMeans:
    """The mean training image of each class, in pixels, accumulated batch by batch (memory: one image per class)."""

    def __init__(self, n_classes: int):
        self.sums: np.ndarray | None = None
        self.counts = np.zeros(n_classes, dtype=np.int64)

    def add(self, images: np.ndarray, labels: np.ndarray) -> None:
        flat = np.asarray(images, dtype=np.float64).reshape(len(images), -1)
        if self.sums is None:
            self.sums = np.zeros((len(self.counts), flat.shape[1]))
        np.add.at(self.sums, np.asarray(labels, dtype=np.int64), flat)
        self.counts += np.bincount(labels, minlength=len(self.counts))

    def predict(self, images: np.ndarray) -> np.ndarray:
        """The class of the nearest mean (squared Euclidean) for each image; classes never seen are never chosen."""
        if self.sums is None:
            raise ValueError("no training images were added: there is no class mean to compare with")
        means = self.sums / np.maximum(self.counts, 1)[:, None]
        flat = np.asarray(images, dtype=np.float64).reshape(len(images), -1)
        distances = (flat**2).sum(1)[:, None] - 2 * flat @ means.T + (means**2).sum(1)[None]
        distances[:, self.counts == 0] = np.inf
        return distances.argmin(axis=1)
