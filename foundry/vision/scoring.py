"""`foundry evaluate` on images: registered image classifiers scored on an image data version or source, and
reported (accuracy, macro F1 and loss beside the majority and nearest-class-mean baselines, then accuracy per
class; the chart is accuracy).

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

from foundry.config import FoundryConfig
from foundry.core.metrics.images import VisionMetrics
from foundry.core.redact import redact_url
from foundry.evaluate.report import best, head, markdown, name_of, runs_lines
from foundry.evaluate.scores import Baselines, Evaluation, EvaluationData, ModelRef, ModelScores, described
from foundry.evaluate.scoring import Scoring, Source
from foundry.vision.config import reading_images

IMAGE = "image"
CHANNELS = {"gray": 1, "rgb": 3}


def saved_of(ref: ModelRef) -> dict:
    from foundry.vision.evaluate import load_saved

    if ref.artifacts is None:
        raise ValueError(f"{ref.model}: download its files first (`downloaded`)")
    return load_saved(ref.artifacts / "model.pt")


def is_classifier(ref: ModelRef) -> bool:
    """An image classifier: no tokenizer.json travels with it (a language model's does: no need to load its
    weights), and its model.pt says so."""
    if ref.artifacts is None:
        raise ValueError(f"{ref.model}: download its files first (`downloaded`)")
    if (ref.artifacts / "tokenizer.json").is_file():
        return False
    return saved_of(ref).get("modality") == IMAGE


def image_config(config: FoundryConfig, saved: dict) -> FoundryConfig:
    """`config` (its `data.source` the source) reading images as the model takes them: data.modality image and
    the model's size, channels and fitting mode."""
    fitted = saved["image"]
    return reading_images(config, fitted["size"], fitted["channels"], fitted["mode"])


def prepared_images(config: FoundryConfig, refs: list[ModelRef], out_dir: Path) -> EvaluationData:
    """`config.data.source` acquired and prepared into `out_dir` (a staging folder) with the first model's image
    settings: the pipeline's image rules, on no parent ledger, never versioned."""
    from foundry.core.preparing import Preparing
    from foundry.vision.stage import acquire_images, prepare_image_dataset

    read = image_config(config, saved_of(refs[0]))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    source = acquire_images(read, out_dir.parent / "source_manifest.json")
    prepare_image_dataset(Preparing(source, read, out_dir))  # on no parent
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

    from foundry.core.metrics.images import majority_accuracy
    from foundry.vision.evaluate import batches, class_means
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
    from foundry.core.metrics.images import PREFIX

    kept = scores.vision.model_copy(update={f"{name}_accuracy": None for name in VisionMetrics.BASELINES})
    return {"eval/" + key.removeprefix(PREFIX): value for key, value in kept.as_mlflow().items()}


# --- the report: accuracy (higher is better), per class ------------------------------------------


def rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """One row per model, the most accurate first, then the baselines."""
    table = []
    for m in sorted(evaluation.models, key=lambda m: -m.vision.accuracy):
        v = m.vision
        row = {"model": name_of(m), "accuracy": f"{v.accuracy:.4f}", "macro_f1": f"{v.macro_f1:.4f}"}
        table.append(row | {"loss": f"{v.loss:.4f}", "images": f"{v.images:,}"})
    for name, value in sorted(evaluation.baselines.scores.items(), key=lambda item: -item[1]):
        row = {"model": f"baseline: {VisionMetrics.LABELS[name]}", "accuracy": f"{value:.4f}"}
        table.append(row | {"macro_f1": "", "loss": "", "images": ""})
    return table


def class_rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """Accuracy on each holdout class, one column per model (in the order asked)."""
    classes: dict[str, None] = {}
    for m in evaluation.models:
        classes.update(dict.fromkeys(m.vision.per_class_accuracy))
    table = []
    for label in classes:
        row = {"class": label}
        for m in evaluation.models:
            found = m.vision.per_class_accuracy.get(label)
            row[name_of(m)] = "" if found is None else f"{found:.4f}"
        table.append(row)
    return table


def comparison(evaluation: Evaluation) -> str:
    opening = head(evaluation, rows(evaluation), f"{evaluation.holdout_records:,} images", "images")
    by_class = ["accuracy by class:", "", markdown(class_rows(evaluation))]
    return "\n".join(opening + by_class + runs_lines(evaluation))


def chart(evaluation: Evaluation, path: Path) -> Path:
    from foundry.reports.plots import accuracy_bars

    models = {name_of(m): m.vision.accuracy for m in evaluation.models}
    baselines = {f"baseline: {VisionMetrics.LABELS[k]}": v for k, v in evaluation.baselines.scores.items()}
    return accuracy_bars(models, baselines, f"Accuracy on {evaluation.data.label}", path)


class ImageScoring(Scoring):
    figure = "Accuracy"
    holding = IMAGE
    records = ("classification",)
    others = "language models"
    elsewhere = "text"

    def prepared(self, source: Source) -> EvaluationData | None:
        """Images, when the config reads the source as images or the first model is a classifier; every model
        must be one, before the source is prepared."""
        config = source.config
        if config.data.modality != IMAGE and not is_classifier(source.refs[0]):
            return None
        self.refuse(source.refs, config.data.source)
        return prepared_images(config, source.refs, source.staging)

    def source_settings(self, source: str) -> dict[str, str]:
        """Only images come from `sklearn://` (`foundry.vision.builtin`)."""
        return {"modality": IMAGE} if source.startswith("sklearn://") else {}

    def reads(self, ref: ModelRef) -> bool:
        return is_classifier(ref)

    def check_models(self, refs: list[ModelRef], data: EvaluationData) -> None:
        super().check_models(refs, data)
        check_images(refs, data)

    def baselines(self, data: EvaluationData, config: FoundryConfig) -> Baselines:
        return image_baselines(data, config)

    def score(self, ref: ModelRef, data: EvaluationData, config: FoundryConfig, base: Baselines) -> ModelScores:
        return score_images(ref, data.dir, config, base)

    def holdout(self, data: EvaluationData) -> tuple[int, int | None]:
        """No bytes; the holdout's images."""
        from foundry.data.manifest import DatasetManifest

        return 0, sum(DatasetManifest.read(data.dir).image_counts.get("holdout", {}).values())

    def metrics(self, scores: ModelScores) -> dict[str, float]:
        return image_metrics(scores)

    def rows(self, evaluation: Evaluation) -> list[dict[str, str]]:
        return rows(evaluation)

    def comparison(self, evaluation: Evaluation) -> str:
        return comparison(evaluation)

    def outcome(self, evaluation: Evaluation) -> str:
        return best(evaluation.models, lambda m: m.vision.accuracy, "accuracy {:.4f}")

    def headline(self, scores: ModelScores) -> str:
        return f"accuracy {scores.vision.accuracy:.4f} on {scores.vision.images} images"

    def chart(self, evaluation: Evaluation, path: Path) -> Path:
        return chart(evaluation, path)


SCORING = ImageScoring()
