"""The chat workload: conversations or preference pairs (`foundry.align.prepare`), a GPT aligned on them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundry.core.workload import Workload
from foundry.data.manifest import DatasetManifest
from foundry.pretrain.workload import WORKLOAD as TEXT

if TYPE_CHECKING:
    from foundry.config import FoundryConfig
    from foundry.core.contracts import Candidate, ParentModel, SourceManifest
    from foundry.data.prepare import Prepared
    from foundry.data.validation_report import ValidationReport
    from foundry.evaluate.scoring import Scoring
    from foundry.gates.decision import Decision
    from foundry.purge.data import Matched, VersionFiles
    from foundry.purge.plan import Criterion, DataHit, Location

KINDS = ("chat", "preference")


class ChatWorkload(Workload):
    name = "chat"

    # --- data, purge and serving ------------------------------------------------------------------
    # Records are read from text sources, purged as documents are (`foundry.purge.data` knows both tables) and an
    # aligned GPT is served as any GPT: as text's. Only their preparation is their own: `foundry align`'s.

    def reads(self, manifest: DatasetManifest) -> bool:
        return manifest.kind in KINDS

    def acquire(self, config: FoundryConfig, out: Path) -> SourceManifest:
        return TEXT.acquire(config, out)

    def prepare(self, source: SourceManifest, config: FoundryConfig, out_dir: Path, **how: Any) -> Prepared:
        raise ValueError(
            "chat and preference records are prepared by `foundry align` (tasks.align.align_dataset, on the split "
            "ledger of $FOUNDRY_HOME/ledgers), not by the data stage: run `foundry align`"
        )

    def validate(
        self,
        data_dir: Path,
        config: FoundryConfig,
        report_path: Path,
        docs_dir: Path | None = None,
        parent: Path | None = None,
    ) -> ValidationReport:
        from foundry.align.validate import validate_aligned

        return validate_aligned(data_dir, config, report_path, docs_dir)  # split on the ledger: no parent to match

    def shaping(self, config: FoundryConfig) -> dict[str, Any]:
        raise ValueError("a chat dataset's cache key is foundry.align.prepare.align_dataset_key's: run `foundry align`")

    def data_metrics(self, manifest: DatasetManifest) -> dict[str, float]:
        return TEXT.data_metrics(manifest)

    def prepared_line(self, manifest: DatasetManifest) -> str:
        return TEXT.prepared_line(manifest)

    def purge_matching(self, files: VersionFiles, criterion: Criterion) -> Matched:
        return TEXT.purge_matching(files, criterion)

    def purge_locations(
        self, files: VersionFiles, criterion: Criterion, matched: Matched, shas: set[str], names: set[str]
    ) -> list[Location]:
        return TEXT.purge_locations(files, criterion, matched, shas, names)

    def purge_rewrite(
        self, files: VersionFiles, hit: DataHit, gone: set[str], names: set[str], out: Path
    ) -> dict[str, int] | None:
        return TEXT.purge_rewrite(files, hit, gone, names, out)

    def finetune_sections(self, config: FoundryConfig, parent: ParentModel) -> dict[str, Any]:
        return TEXT.finetune_sections(config, parent)

    def log_served_model(self, run_id: str, checkpoint: Path, tokenizer: Path, config: FoundryConfig) -> str:
        return TEXT.log_served_model(run_id, checkpoint, tokenizer, config)

    def model_card(
        self, config: FoundryConfig, candidate: Candidate, decision: Decision, run_id: str, git: dict[str, str]
    ) -> str:
        return TEXT.model_card(config, candidate, decision, run_id, git)

    def event_scores(self, metrics: Any) -> dict[str, float]:
        return TEXT.event_scores(metrics)

    def holds(self, data_dir: Path) -> bool:
        return (Path(data_dir) / "manifest.json").is_file() and DatasetManifest.read(data_dir).kind in KINDS

    def data(self, data_dir: Path) -> DatasetManifest:
        return DatasetManifest.read(data_dir)

    # --- training ---

    def module(self, config, data: DatasetManifest, settings: dict, on_gpu: bool):
        """`LitSFT` for conversations, `LitDPO` for preference pairs (`foundry.align.training`)."""
        from foundry.align.training import build_aligned_module
        from foundry.pretrain.training import model_args

        return build_aligned_module(config, model_args(config, data.vocab_size), data.kind, settings)

    def loaders(self, config, data_dir: Path, data: DatasetManifest, rank: int, world_size: int, replay):
        from foundry.align.training import aligned_loaders

        return aligned_loaders(config, data_dir, data, rank, world_size, replay)

    def warm_start(self, parent: dict, module, data: DatasetManifest, config) -> dict:
        from foundry.training.warm_start import text_start

        return text_start(parent, module.model.config)

    def after_fit(self, module) -> None:
        """Nothing: a GPT has no buffers a rank changes (no running statistics), so DDP and FSDP leave ranks equal."""

    def saved_extra(self, config, data: DatasetManifest) -> dict:
        """The chat template the records were rendered with: what a request's messages are rendered with."""
        return {"chat_template": data.chat_template} if data.chat_template is not None else {}

    def fsdp_units(self, module) -> set[type]:
        from foundry.pretrain.training import gpt_blocks

        return gpt_blocks(module)

    def retrain_sections(self, config: FoundryConfig, recorded: dict) -> dict[str, Any]:
        return {}  # the model's shape and tokenizer are the parent's already (`warm_started_from`)

    # --- evaluation and gates: its gate is the alignment gate (`foundry.align.gate`) ---

    def scoring(self) -> Scoring:
        from foundry.align.scoring import SCORING

        return SCORING


WORKLOAD = ChatWorkload()
