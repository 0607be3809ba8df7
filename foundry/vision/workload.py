"""The image workload: labelled images in WebDataset shards (`foundry.vision.stage`), a classifier trained on them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundry.core.preparing import Preparing, Validating
from foundry.core.workload import Purging, Workload
from foundry.data.manifest import FILE as MANIFEST
from foundry.gates.inputs import Compared
from foundry.vision.gate_inputs import BY_ACCURACY

# `foundry.vision.shards.FILE`, named here: asking whether a folder holds images must not import torch and Pillow
FILE = "shards.json"

if TYPE_CHECKING:
    from foundry.config import FoundryConfig
    from foundry.core.contracts import Candidate, ParentModel, RunContext, SourceManifest
    from foundry.core.metrics.images import VisionMetrics
    from foundry.core.version_tags import VersionTags
    from foundry.data.manifest import DatasetManifest
    from foundry.data.prepared import Prepared
    from foundry.data.validation_report import ValidationReport
    from foundry.evaluate.scoring import Scoring
    from foundry.gates.decision import Decision
    from foundry.vision.shards import ShardManifest


class ImageWorkload(Workload):
    name = "image"
    describes = "an image classifier"

    # --- data, purge and serving ------------------------------------------------------------------

    finetunes_on_base_data = True  # the base's classes keep their indices (its head's rows), its holdout stays holdout
    data_plots = ("misclassified.png",)  # the misclassified-images grids (`foundry.vision.evaluate`)
    audit_files = ("audit.json",)
    data_files = (MANIFEST, FILE)  # the shards' manifest beside the dataset's

    def file_holds(self, name: str, extensions: list[str], alone: bool) -> bool:
        """An image (gzip-compressed or not), or, named alone, a .csv that is not a text type: an index of images."""
        from foundry.vision.config import IMAGE_EXTENSIONS

        if Path(name.lower().removesuffix(".gz")).suffix in IMAGE_EXTENSIONS:
            return True
        return alone and Path(name).suffix.lower() == ".csv" and ".csv" not in extensions

    def acquire(self, config: FoundryConfig, out: Path) -> SourceManifest:
        from foundry.vision.stage import acquire_images  # torch and Pillow: imported only when images are asked for

        return acquire_images(config, out)

    def prepare(self, job: Preparing) -> Prepared:
        """Decoding and hashing a few thousand images: in this process, with no bars or progress file."""
        from foundry.vision.stage import prepare_image_dataset

        return prepare_image_dataset(job)

    def validate(self, job: Validating) -> ValidationReport:
        from foundry.vision.validate_images import validate_image_dataset

        return validate_image_dataset(job)

    def shaping(self, config: FoundryConfig) -> dict[str, Any]:
        # images are fitted and sharded by it; no tokenizer. How many processes prepare or load them, and how many
        # decoded images a loader keeps, change nothing.
        return {
            "image": config.image.model_dump(mode="json", exclude={"workers", "loader_workers", "decoded_cache_mb"})
        }

    def data_metrics(self, manifest: DatasetManifest) -> dict[str, float]:
        return {**manifest.data_metrics(), "data/classes": len(manifest.classes)}

    def prepared_line(self, manifest: DatasetManifest) -> str:
        return f"{manifest.count('train_images')} train / {manifest.count('holdout_images')} holdout images"

    def data_stage(self, data_dir: Path) -> tuple[list[dict], str]:
        """Images in and kept, drops by reason, metadata stripped, images per split and label (`ImageAudit`)."""
        import json

        from foundry.vision.table import AUDIT, ImageAudit, stage_summary, stage_table

        audit = ImageAudit.model_validate(json.loads((Path(data_dir) / AUDIT).read_text()))
        return stage_table(audit), stage_summary(audit)

    def purging(self) -> Purging:
        from foundry.vision import purge as images

        return Purging(images.matching, images.locations, images.rewrite)

    def finetune_sections(self, config: FoundryConfig, parent: ParentModel) -> dict[str, Any]:
        """Its `image` and `vision` sections (the run's own settings where it changed them), fine-tuned whole."""
        from foundry.vision.finetune import image_sections

        if config.finetune.method != "full":
            raise ValueError(
                f"finetune.method {config.finetune.method} adapts a GPT's projections; {parent.uri} is an image "
                "classifier, fine-tuned whole: set finetune.method to full"
            )
        return image_sections(config, parent.config)

    def log_served_model(self, run_id: str, checkpoint: Path, tokenizer: Path, config: FoundryConfig) -> str:
        """Images in, a label and each class's probability out (`foundry.serving.vision_pyfunc`), bounded by the
        default `IMAGE_LIMITS`: the config's `serving` section bounds text generation. No tokenizer."""
        from foundry.vision.package import log_vision_model

        return log_vision_model(run_id, checkpoint)

    def model_card(self, config: FoundryConfig, candidate: Candidate, decision: Decision, tags: VersionTags) -> str:
        from foundry.vision.card import vision_card
        from foundry.vision.evaluate import load_saved
        from models.vision import classifier_from_saved

        saved = load_saved(candidate.checkpoint)
        n_params = classifier_from_saved(saved).num_params()
        return vision_card(config.registry.model_name, saved, candidate.metrics, decision, n_params, tags)

    def event_scores(self, metrics: VisionMetrics) -> dict[str, float]:
        return {metrics.key("accuracy"): metrics.accuracy}

    def holds(self, data_dir: Path) -> bool:
        return (Path(data_dir) / FILE).is_file()

    def data(self, data_dir: Path) -> ShardManifest:
        from foundry.vision.shards import ShardManifest

        return ShardManifest.read(data_dir)

    # --- training ---

    def module(self, config, data: ShardManifest, settings: dict, on_gpu: bool):
        from foundry.vision.training import build_vision_module

        return build_vision_module(config, data, settings, on_gpu)

    def loaders(self, config, data_dir: Path, data: ShardManifest, rank: int, world_size: int, replay):
        from foundry.vision.training import vision_loaders

        return vision_loaders(config, data_dir, rank, world_size)

    def warm_start(self, parent: dict, module, data: ShardManifest, config) -> dict:
        """The parent classifier's weights, its head grown by a fresh row per class it lacks (`foundry.vision.finetune`)."""
        from foundry.vision.finetune import warm_start_state

        return warm_start_state(parent, data.classes, config.train.seed)

    def after_fit(self, module) -> None:
        """BatchNorm's statistics, which neither DDP nor FSDP reduces: rank 0's on every rank."""
        from foundry.training.sharding import rank0_buffers

        rank0_buffers(module)

    def saved_extra(self, config, data: ShardManifest) -> dict:
        """The labels and the preprocessing a request needs (`foundry.vision.training.saved_extra`)."""
        from foundry.vision.training import saved_extra

        return saved_extra(config, data)

    def fsdp_units(self, module) -> set[type]:
        """A ViT's blocks; a CNN has none and is one unit."""
        from models.vision import Block

        return {type(m) for m in module.modules() if isinstance(m, Block)}

    def retrain_sections(self, config: FoundryConfig, recorded: dict) -> dict[str, Any]:
        """The modality and the `image` and `vision` settings that fix the weights' and inputs' shape: the parent's."""
        from foundry.vision.finetune import image_sections

        return image_sections(config, recorded)

    # --- evaluation and gates ---

    def scoring(self) -> Scoring:
        from foundry.vision.scoring import SCORING

        return SCORING

    def validate_model(self, config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext) -> VisionMetrics:
        from foundry.vision.validation import validate

        return validate(config, checkpoint, data_dir, run)

    def summary_table(self, metrics: VisionMetrics, decision: Decision) -> Any:
        from foundry.vision.card import vision_summary_table

        return vision_summary_table(metrics, decision)

    def gate_compares(self) -> Compared:
        return BY_ACCURACY

    def gate_score(self, weights: Path, tokenizer: Path, data_dir: Path, config: FoundryConfig) -> float:
        """Holdout accuracy (a classifier has no tokenizer)."""
        from foundry.vision.evaluate import accuracy_on

        return accuracy_on(weights, data_dir, config.evaluation.batch_size)

    def recorded_score(self, version, config: FoundryConfig) -> float | None:
        """Its recorded accuracy: the whole holdout is always scored, so any record is scored alike."""
        from foundry.registry.lineage import recorded_metrics

        return recorded_metrics(version).get(VisionMetrics.key("accuracy"))


WORKLOAD = ImageWorkload()
