"""The chat workload: conversations or preference pairs (`foundry.align.prepare`), a GPT aligned on them."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundry.core.preparing import Preparing, Validating
from foundry.core.workload import HomeLedger
from foundry.data.manifest import DatasetManifest
from foundry.pretrain.workload import GptWorkload

if TYPE_CHECKING:
    from foundry.config import FoundryConfig
    from foundry.data.prepared import Prepared
    from foundry.data.validation_report import ValidationReport
    from foundry.evaluate.scoring import Scoring


class ChatWorkload(GptWorkload):
    name = "chat"

    describes = "an aligned text model"

    # --- data, purge and serving ------------------------------------------------------------------
    # Records are read from text sources, purged as documents are (from their own table, their tokens in ragged
    # arrays) and an aligned GPT is served as any GPT (`GptWorkload`). Their preparation is `foundry align`'s.

    documents_table, unit, tokens_in_shards = "records.csv", "records", False

    def document_text(self, line: dict) -> str:
        """Every string of the record (its messages, prompt, chosen and rejected answers), one a line."""
        return "\n".join(_strings(line))

    def prepare(self, job: Preparing) -> Prepared:
        raise ValueError(
            "chat and preference records are prepared by `foundry align` (tasks.align.align_dataset, on the split "
            "ledger of $FOUNDRY_HOME/ledgers), not by the data stage: run `foundry align`"
        )

    def validate(self, job: Validating) -> ValidationReport:
        from foundry.align.validate import validate_aligned

        # split on the ledger: no parent to match
        return validate_aligned(job.data_dir, job.config, job.report_path, job.docs_dir)

    def shaping(self, config: FoundryConfig) -> dict[str, Any]:
        raise ValueError("a chat dataset's cache key is foundry.align.prepare.align_dataset_key's: run `foundry align`")

    def home_ledgers(self, home: Path) -> tuple[HomeLedger, ...]:
        """The alignment ledger (`foundry.align.split_ledger`): the sticky splits of every alignment preparation on
        the home, one generation a folder, locked while a preparation extends it."""
        from foundry.align import split_ledger

        return (HomeLedger(split_ledger.store(home), partial(split_ledger.locked, home)),)

    # --- training ---

    def module(self, config, data: DatasetManifest, settings: dict, on_gpu: bool):
        """`LitSFT` for conversations, `LitDPO` for preference pairs (`foundry.align.training`)."""
        from foundry.align.training import build_aligned_module
        from foundry.pretrain.training import model_args

        return build_aligned_module(config, model_args(config, data.vocab_size), data.kind, settings)

    def loaders(self, config, data_dir: Path, data: DatasetManifest, rank: int, world_size: int, replay):
        from foundry.align.training import aligned_loaders

        return aligned_loaders(config, data_dir, data, rank, world_size, replay)

    def saved_extra(self, config, data: DatasetManifest) -> dict:
        """The chat template the records were rendered with: what a request's messages are rendered with."""
        return {"chat_template": data.chat_template} if data.chat_template is not None else {}

    # --- evaluation and gates: its gate is the alignment gate (`foundry.align.gate`) ---

    def scoring(self) -> Scoring:
        from foundry.align.scoring import SCORING

        return SCORING


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


WORKLOAD = ChatWorkload()
