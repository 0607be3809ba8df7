"""Stage E for images: a trained classifier (`model.pt`) on a prepared image dataset's holdout shards.

    metrics = evaluate_images(config, Path("model.pt"), data_dir, plots_dir=run_dir / "evaluation")

One pass over the holdout gives the model's accuracy, macro F1, per-class accuracy and loss, and the nearest class
mean baseline's predictions beside them; one pass over the train split gives the class means. The majority baseline
needs only the train split's counts (`shards.json`). With `plots_dir`, the confusion matrix and a grid of
misclassified holdout images are written there as PNGs, for the run's artifacts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from foundry.core.metrics.images import (
    ClassMeans,
    VisionMetrics,
    accuracy_of,
    confusion,
    macro_f1,
    majority_accuracy,
    per_class_accuracy,
)
from foundry.vision.shards import ShardDataset, ShardManifest

MISCLASSIFIED_SHOWN = 36  # images in the grid: enough to see a pattern, small enough to read


def load_saved(checkpoint: Path) -> dict:
    return torch.load(checkpoint, map_location="cpu", weights_only=True)


@dataclass
class HoldoutPass:
    """What one pass over the holdout collected: targets, both predictions, summed loss, some misclassified images."""

    targets: list[np.ndarray] = field(default_factory=list)
    predictions: list[np.ndarray] = field(default_factory=list)
    nearest_mean: list[np.ndarray] = field(default_factory=list)
    loss_sum: float = 0.0
    wrong: list[tuple[np.ndarray, int, int]] = field(default_factory=list)  # (image CHW, true, predicted)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        join = lambda parts: np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)  # noqa: E731
        return join(self.targets), join(self.predictions), join(self.nearest_mean)


def batches(folder: Path, split: str, batch_size: int):
    """(uint8 images (B, C, H, W), class indices (B,)) of a split, in the written order."""
    loader = torch.utils.data.DataLoader(ShardDataset(folder, split), batch_size=batch_size, num_workers=0)
    yield from loader


def class_means(folder: Path, n_classes: int, batch_size: int) -> ClassMeans:
    means = ClassMeans(n_classes)
    for images, labels in batches(folder, "train", batch_size):
        means.add(images.numpy(), labels.numpy())
    return means


@torch.no_grad()
def holdout_pass(model, folder: Path, batch_size: int, means: ClassMeans | None) -> HoldoutPass:
    seen = HoldoutPass()
    for images, labels in batches(folder, "holdout", batch_size):
        logits, _ = model(images)
        if len(labels) and int(labels.max()) >= logits.shape[1]:  # labels the model lacks: never its answer
            logits = F.pad(logits, (0, int(labels.max()) + 1 - logits.shape[1]), value=-float("inf"))
        seen.loss_sum += float(F.cross_entropy(logits.float(), labels, reduction="sum"))
        predicted = logits.argmax(dim=1)
        seen.targets.append(labels.numpy())
        seen.predictions.append(predicted.numpy())
        if means is not None:
            seen.nearest_mean.append(means.predict(images.numpy()))
        for i in torch.nonzero(predicted != labels).flatten().tolist():
            if len(seen.wrong) < MISCLASSIFIED_SHOWN:
                seen.wrong.append((images[i].numpy(), int(labels[i]), int(predicted[i])))
    return seen


def metrics_of(seen: HoldoutPass, classes: list[str], train_counts: dict[str, int]) -> VisionMetrics:
    """The pass's figures as one value (pure: arrays in, metrics out)."""
    targets, predictions, nearest = seen.arrays()
    if not len(targets):
        raise ValueError("the holdout holds no images: nothing to evaluate; prepare the data with a holdout share")
    matrix = confusion(targets, predictions, len(classes))
    return VisionMetrics(
        accuracy=accuracy_of(matrix),
        macro_f1=macro_f1(matrix),
        loss=seen.loss_sum / len(targets),
        images=len(targets),
        majority_accuracy=majority_accuracy(train_counts, targets, classes),
        nearest_class_mean_accuracy=float((nearest == targets).mean()) if len(nearest) else None,
        per_class_accuracy=per_class_accuracy(matrix, classes),
    )


def check_classes(saved: dict, shards: ShardManifest, data_dir: Path) -> list[str]:
    """The longer of the model's and the dataset's classes, the other being its start: a fine-tune only adds
    classes, so a fine-tuned model scores on its base's data, and a base on data with labels it lacks (misses)."""
    model, data = list(saved.get("classes") or shards.classes), list(shards.classes)
    shared = min(len(model), len(data))
    if model[:shared] != data[:shared]:
        raise ValueError(
            f"the model's classes {model[:10]} do not index {data_dir}'s classes {data[:10]} the same "
            "way: evaluate it on the dataset it was trained on, or one prepared with its classes"
        )
    return model if len(model) >= len(data) else data


def evaluate_images(config, checkpoint: Path, data_dir: Path, plots_dir: Path | None = None) -> VisionMetrics:
    """A saved classifier's holdout metrics and both baselines on `data_dir` (a prepared image dataset);
    with `plots_dir`, also `confusion_matrix.png` and `misclassified.png` there."""
    from models.vision import classifier_from_saved

    saved = load_saved(checkpoint)
    model = classifier_from_saved(saved)
    shards = ShardManifest.read(data_dir)
    classes = check_classes(saved, shards, data_dir)
    batch_size = config.evaluation.batch_size
    means = class_means(data_dir, len(classes), batch_size) if shards.images("train") else None
    seen = holdout_pass(model, data_dir, batch_size, means)
    metrics = metrics_of(seen, classes, shards.counts.get("train", {}))
    if plots_dir is not None:
        write_plots(seen, classes, Path(plots_dir))
    return metrics


def write_plots(seen: HoldoutPass, classes: list[str], plots_dir: Path) -> list[Path]:
    from foundry.reports.plots import confusion_matrix_plot, image_grid

    plots_dir.mkdir(parents=True, exist_ok=True)
    targets, predictions, _ = seen.arrays()
    matrix = confusion(targets, predictions, len(classes))
    titles = [f"{classes[t]} → {classes[p]}" for _, t, p in seen.wrong]
    return [
        confusion_matrix_plot(matrix, classes, plots_dir / "confusion_matrix.png"),
        image_grid(
            [image for image, _, _ in seen.wrong],
            titles,
            "Misclassified (true → predicted)",
            plots_dir / "misclassified.png",
        ),
    ]


def accuracy_on(checkpoint: Path, data_dir: Path, batch_size: int) -> float:
    """Holdout accuracy only (the gate's re-scoring of a champion): no baselines, no plots."""
    from models.vision import classifier_from_saved

    saved = load_saved(checkpoint)
    check_classes(saved, ShardManifest.read(data_dir), data_dir)
    targets, predictions, _ = holdout_pass(classifier_from_saved(saved), data_dir, batch_size, None).arrays()
    return float((targets == predictions).mean()) if len(targets) else 0.0
