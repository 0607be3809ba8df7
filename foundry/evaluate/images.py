"""`foundry evaluate` on images: registered image classifiers scored on an image data version or source.

    foundry evaluate models:/foundry-vision-tiny/1 models:/foundry-vision-tiny@champion --data sklearn://digits

A source that is not a data version (a class-per-subfolder folder, an index, an archive, `sklearn://digits`) is
prepared by the pipeline's image rules (`foundry.vision.stage`: decoding, metadata stripped, de-duplication, the
content-hash holdout) with the first model's image settings (size, channels, fitting), on no parent ledger, into
the evaluation run's staging folder, as text is prepared with the first model's tokenizer.

Each model is scored on the holdout (accuracy, macro F1, loss, per-class accuracy); the baselines depend on the
data alone and are computed once: always the majority class of the train split, and the nearest class mean in
pixels. A model reads the dataset's classes by label, so a fine-tune that appended classes is scored on its
base's data; a holdout label the model does not know, images of another shape, or a model of the other modality
than the data are refused before any model is scored.
"""

from __future__ import annotations

from pathlib import Path

from foundry.config import FoundryConfig, validate
from foundry.core.redact import redact_url
from foundry.evaluate.scores import Baselines, EvaluationData, ModelRef, ModelScores, described
from foundry.vision.metrics import VisionMetrics

IMAGE = "image"
TEXT = "text"
CHANNELS = {"gray": 1, "rgb": 3}


def saved_of(ref: ModelRef) -> dict:
    from foundry.vision.evaluate import load_saved

    if ref.artifacts is None:
        raise ValueError(f"{ref.model}: download its files first (`downloaded`)")
    return load_saved(ref.artifacts / "model.pt")


def modality_of(ref: ModelRef) -> str:
    """text for a language model (its tokenizer.json travels with it: no need to load its weights), image for a
    classifier whose model.pt says so."""
    if ref.artifacts is None:
        raise ValueError(f"{ref.model}: download its files first (`downloaded`)")
    if (ref.artifacts / "tokenizer.json").is_file():
        return TEXT
    return IMAGE if saved_of(ref).get("modality") == IMAGE else TEXT


def refuse_other_modality(refs: list[ModelRef], data_modality: str, data_label: str) -> None:
    """Every model must read the data's modality: a language model on images, or a classifier on documents, is
    refused by name before any model is scored."""
    other = [ref for ref in refs if modality_of(ref) != data_modality]
    if other:
        named = ", ".join(ref.model for ref in other)
        what = "image classifiers" if data_modality == TEXT else "language models"
        raise ValueError(
            f"{named}: {what}, and {data_label} holds {data_modality} data: `foundry evaluate` scores models on "
            f"data of their own modality; evaluate them separately, on "
            f"{'an image data version, an image folder or sklearn://digits' if data_modality == TEXT else 'text'}"
        )


def first_modality(refs: list[ModelRef]) -> str:
    return modality_of(refs[0])


def image_config(config: FoundryConfig, saved: dict) -> FoundryConfig:
    """`config` (its `data.source` the source) reading images as the model takes them: data.modality image and
    the model's size, channels and fitting mode."""
    raw = config.model_dump()
    raw["data"]["modality"] = IMAGE
    raw["image"].update({key: saved["image"][key] for key in ("size", "channels", "mode")})
    return validate(raw)


def prepared_images(config: FoundryConfig, refs: list[ModelRef], out_dir: Path) -> EvaluationData:
    """`config.data.source` acquired and prepared into `out_dir` (a staging folder) with the first model's image
    settings: the pipeline's image rules, on no parent ledger, never versioned."""
    from foundry.vision.stage import acquire_images, prepare_image_dataset

    read = image_config(config, saved_of(refs[0]))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    source = acquire_images(read, out_dir.parent / "source_manifest.json")
    prepare_image_dataset(source, read, out_dir, parent=None)
    return described(redact_url(read.data.source), out_dir, None, None)


def check_images(refs: list[ModelRef], data: EvaluationData) -> None:
    """Each model takes the data's image shape and knows every holdout label, or none is scored."""
    from foundry.vision.shards import ShardManifest

    shards = ShardManifest.read(data.dir)
    channels, size, _ = shards.shape
    holdout_labels = {label for label, n in shards.counts.get("holdout", {}).items() if n}
    for ref in refs:
        saved = saved_of(ref)
        image = saved["image"]
        if (CHANNELS[image["channels"]], image["size"]) != (channels, size):
            raise ValueError(
                f"{ref.model} takes {image['size']}x{image['size']} {image['channels']} images; {data.label} holds "
                f"{size}x{size} with {channels} channel(s): evaluate it on data prepared with its settings"
            )
        unknown = sorted(holdout_labels - set(saved["classes"]))
        if unknown:
            raise ValueError(
                f"{ref.model} was not trained on the label(s) {unknown[:10]} of {data.label}'s holdout: it cannot "
                "be right on them; evaluate it on data of its own classes, or fine-tune it on these first"
            )


def image_baselines(data: EvaluationData, config: FoundryConfig) -> Baselines:
    """Majority class and nearest class mean accuracy on the holdout, given the train split (by the data's own
    class indices): once for every model."""
    import numpy as np

    from foundry.vision.evaluate import batches, class_means
    from foundry.vision.metrics import majority_accuracy
    from foundry.vision.shards import ShardManifest

    shards, batch_size = ShardManifest.read(data.dir), config.evaluation.batch_size
    means = class_means(data.dir, len(shards.classes), batch_size) if shards.images("train") else None
    targets, nearest = [], []
    for images, labels in batches(data.dir, "holdout", batch_size):
        targets.append(labels.numpy())
        if means is not None:
            nearest.append(means.predict(images.numpy()))
    if not targets:
        raise ValueError(f"{data.label}: the holdout holds no images, nothing to evaluate")
    truth = np.concatenate(targets)
    scores = {"majority": majority_accuracy(shards.counts.get("train", {}), truth, shards.classes)}
    if nearest:
        scores["nearest_class_mean"] = float((np.concatenate(nearest) == truth).mean())
    return Baselines(scores=scores, train_bytes=0, unit="accuracy")


def score_images(ref: ModelRef, data_dir: Path, config: FoundryConfig, base: Baselines) -> ModelScores:
    """The model's accuracy, macro F1, loss and per-class accuracy on the holdout, the data's classes read by
    label into the model's class indices; the baselines beside them."""
    import numpy as np

    from foundry.vision.evaluate import holdout_pass, metrics_of
    from foundry.vision.shards import ShardManifest
    from models.vision import classifier_from_saved

    saved, shards = saved_of(ref), ShardManifest.read(data_dir)
    classes = list(saved["classes"])
    seen = holdout_pass(classifier_from_saved(saved), data_dir, config.evaluation.batch_size, None)
    to_model = np.asarray([classes.index(label) if label in classes else -1 for label in shards.classes])
    seen.targets = [to_model[t] for t in seen.targets]  # refused before scoring when a holdout label is unknown
    metrics = metrics_of(seen, classes, shards.counts.get("train", {}))
    baselines = {f"{name}_accuracy": value for name, value in base.scores.items()}
    return ModelScores(model=ref, tokenizer="", vision=metrics.model_copy(update=baselines))


def image_metrics(scores: ModelScores) -> dict[str, float]:
    """`eval/accuracy`, `eval/macro_f1`, `eval/loss`, `eval/images`, `eval/class_accuracy/<label>` (the
    registration's `holdout/` keys under `eval/`), without the baselines (logged on the run, not the model)."""
    from foundry.vision.metrics import PREFIX

    kept = scores.vision.model_copy(update={f"{name}_accuracy": None for name in VisionMetrics.BASELINES})
    return {"eval/" + key.removeprefix(PREFIX): value for key, value in kept.as_mlflow().items()}
