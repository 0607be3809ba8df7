"""The text workload: documents prepared as token shards (`foundry.data`), a GPT pretrained on them; and
`GptWorkload`, what it shares with the chat workload (`foundry.align.workload`): a GPT on text sources."""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.core.preparing import Preparing, Validating
from foundry.core.workload import Purging, Workload
from foundry.data.manifest import FILE, TOKENIZER, DatasetManifest
from foundry.export import GPT_WRITERS
from foundry.gates.inputs import BY_BITS_PER_BYTE, Compared

if TYPE_CHECKING:
    from foundry.config import FoundryConfig
    from foundry.core.contracts import Candidate, ParentModel, RunContext, SourceManifest
    from foundry.core.version_tags import VersionTags
    from foundry.data.prepared import Prepared
    from foundry.data.validation_report import ValidationReport
    from foundry.evaluate.scoring import Scoring
    from foundry.gates.decision import Decision


class GptWorkload(Workload):
    """A GPT on documents read from text sources: what the text and chat workloads share. Their sources are
    acquired, purged (`foundry.purge.data`, by the attributes below), fine-tuned, carded and served as one GPT; only
    how their data is prepared, validated and trained on is each one's own."""

    describes = "a text model"
    exports = GPT_WRITERS  # a transformers folder, a llama.cpp file: a GPT and its tokenizer, aligned or not

    # --- data, purge and serving ------------------------------------------------------------------

    audit_files = ("audit.json", "audit.md")
    data_files = (TOKENIZER, FILE)  # its tokenizer beside the manifest

    # How a purge reads a data version (`foundry.purge.data`, `foundry.purge.rewrite`):
    documents_table: str  # the table listing its documents, row for row with `<split>.jsonl`
    unit: str  # what the manifest's stats call them: `train_docs`, `records_out`
    tokens_in_shards: bool  # each one's tokens a run in its split's shards, ended by end-of-text; else ragged arrays

    @abstractmethod
    def document_text(self, line: dict) -> str:
        """What a purge's criterion is matched against in one line of `<split>.jsonl` (its bytes are what the
        manifest's `<split>_bytes` count, where it has them)."""

    def file_holds(self, name: str, extensions: list[str], alone: bool) -> bool:
        """A text type `data.extensions` reads, gzip-compressed or not."""
        return Path(name.lower().removesuffix(".gz")).suffix in extensions

    def acquire(self, config: FoundryConfig, out: Path) -> SourceManifest:
        from foundry.data.acquire import acquire_source

        return acquire_source(config.data, out)

    def data_metrics(self, manifest: DatasetManifest) -> dict[str, float]:
        from foundry.pretrain.prepare import prepare_metrics

        return prepare_metrics(manifest)

    def prepared_line(self, manifest: DatasetManifest) -> str:
        return f"{manifest.train_tokens} train / {manifest.holdout_tokens} holdout tokens"

    def data_stage(self, data_dir: Path) -> tuple[list[dict], str]:
        """Documents (or records) in and kept, drops by reason and PII replaced by kind (`foundry.data.audit`)."""
        import json

        from foundry.data.audit import stage_summary, stage_table

        audit = json.loads((Path(data_dir) / "audit.json").read_text())
        return stage_table(audit), stage_summary(audit)

    def purging(self) -> Purging:
        from foundry.purge import data
        from foundry.purge.rewrite import rewrite_documents

        return Purging(data.matching, data.locations, rewrite_documents)

    def finetune_sections(self, config: FoundryConfig, parent: ParentModel) -> dict[str, Any]:
        return {}  # the base's model shape and tokenizer: the warm start takes them

    def log_served_model(self, run_id: str, checkpoint: Path, tokenizer: Path, config: FoundryConfig) -> str:
        from foundry.serving.package import log_model

        return log_model(run_id, checkpoint, tokenizer, config.serving.model_dump())

    def model_card(self, config: FoundryConfig, candidate: Candidate, decision: Decision, tags: VersionTags) -> str:
        from foundry.reports.cards import model_card
        from models.gpt import load_gpt

        n_params = load_gpt(candidate.checkpoint).num_params()
        manifest = DatasetManifest.read(candidate.data_dir)
        return model_card(config, manifest, candidate.metrics, decision, n_params, tags)

    def event_scores(self, metrics: HoldoutMetrics) -> dict[str, float]:
        return {metrics.key("bits_per_byte"): metrics.bits_per_byte}

    def holds(self, data_dir: Path) -> bool:
        return (Path(data_dir) / "manifest.json").is_file() and self.reads(DatasetManifest.read(data_dir))

    def data(self, data_dir: Path) -> DatasetManifest:
        return DatasetManifest.read(data_dir)

    # --- training ---

    def warm_start(self, parent: dict, module, data: DatasetManifest, config) -> dict:
        from foundry.pretrain.parent_weights import text_start

        return text_start(parent, module.model.config)

    def after_fit(self, module) -> None:
        """Nothing: a GPT has no buffers a rank changes (no running statistics), so DDP and FSDP leave ranks equal."""

    def fsdp_units(self, module) -> set[type]:
        from foundry.pretrain.training import gpt_blocks

        return gpt_blocks(module)

    def retrain_sections(self, config: FoundryConfig, recorded: dict) -> dict[str, Any]:
        return {}  # the model's shape and tokenizer are the parent's already (`warm_started_from`)


class TextWorkload(GptWorkload):
    name = "text"

    # --- data, purge and serving ------------------------------------------------------------------

    prepares_on_workers = True  # cleaning and tokenizing map over the source files
    documents_table, unit, tokens_in_shards = "documents.csv", "docs", True

    def document_text(self, line: dict) -> str:
        return line["text"]

    def prepare(self, job: Preparing) -> Prepared:
        from foundry.pretrain.prepare import prepare

        return prepare(job)

    def validate(self, job: Validating) -> ValidationReport:
        from foundry.pretrain.validate_documents import validate_documents

        return validate_documents(job)

    def shaping(self, config: FoundryConfig) -> dict[str, Any]:
        return {"tokenizer": config.tokenizer.model_dump(mode="json"), "block_size": config.model.block_size}

    # --- training ---

    def module(self, config, data: DatasetManifest, settings: dict, on_gpu: bool):
        from foundry.pretrain.training import model_args
        from models.lit_gpt import LitGPT

        return LitGPT(model_args(config, data.vocab_size), **settings)

    def loaders(self, config, data_dir: Path, data: DatasetManifest, rank: int, world_size: int, replay):
        from foundry.pretrain.training import text_loaders

        return text_loaders(config, data_dir, rank, world_size)  # pretraining replays nothing: it is the source

    def saved_extra(self, config, data: DatasetManifest) -> dict:
        return {}

    # --- evaluation and gates ---

    def scoring(self) -> Scoring:
        from foundry.pretrain.scoring import SCORING

        return SCORING

    def validate_model(
        self, config: FoundryConfig, checkpoint: Path, data_dir: Path, run: RunContext
    ) -> HoldoutMetrics:
        from foundry.pretrain.validation import validate

        return validate(config, checkpoint, data_dir, run)

    def holdout_metrics(self, weights: Path, tokenizer: Path, data_dir: Path, config: FoundryConfig) -> HoldoutMetrics:
        from foundry.pretrain.holdout_metrics import weights_metrics

        return weights_metrics(weights, tokenizer, data_dir, config)

    def summary_table(self, metrics: HoldoutMetrics, decision: Decision) -> Any:
        from foundry.reports.cards import summary_table

        return summary_table(metrics, decision.inputs.champion_bits_per_byte, decision)

    def gate_compares(self) -> Compared:
        return BY_BITS_PER_BYTE

    def gate_score(self, weights: Path, tokenizer: Path, data_dir: Path, config: FoundryConfig) -> float:
        """Bits per byte on the holdout, tokenized with the model's own tokenizer."""
        from foundry.pretrain.holdout_metrics import gate_score

        return gate_score(weights, tokenizer, data_dir, config)

    def recorded_score(self, version, config: FoundryConfig) -> float | None:
        """Its recorded bits per byte, when scored as this run scores: the same `evaluation.max_tokens` from the
        holdout's start (a record that names none is taken as it was before) and `evaluation.window_overlap`
        (`as_recorded` gives older records the 0 they were scored with)."""
        from foundry.registry.lineage import recorded_config, recorded_metrics

        recorded, e = recorded_config(version).get("evaluation", {}), config.evaluation
        max_tokens, overlap = recorded.get("max_tokens"), recorded.get("window_overlap", 0.0)
        if (max_tokens is None or int(max_tokens) == e.max_tokens) and float(overlap) == e.window_overlap:
            return recorded_metrics(version).get(HoldoutMetrics.key("bits_per_byte"))  # its run's, or older tags
        return None


WORKLOAD = TextWorkload()
