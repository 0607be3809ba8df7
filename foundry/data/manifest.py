"""A prepared dataset's `manifest.json`, as one typed value that owns the file.

Every prepared dataset (documents for pretraining, chat or preference records for alignment) describes
itself in its `manifest.json`: where it came from, what cleaning kept, the tokenizer's size, the token
counts, and each other file's digest. `DatasetManifest` reads and writes that file; readers ask it
questions (`shards_of`, `holdout_bytes`, `checksums`) instead of reaching into the JSON.

The file's bytes are the data version's (DVC hashes the folder): `write` gives, for the same values, the
bytes `json.dumps(..., indent=1)` gave before this class existed, and keys a manifest did not have then
(`modality`, `kind` of a document dataset) are left out while they hold what their absence meant.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from foundry.digests import fast_digest, sha256_file

FILE = "manifest.json"
TOKENIZER = "tokenizer.json"
SPLITS = ("train", "holdout")


def _file(where: Path) -> Path:
    """A dataset folder's manifest, or `where` itself when it names a .json file."""
    path = Path(where)
    return path if path.suffix == ".json" else path / FILE


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Shard(_Value):
    """One flat token file: `tokens` little-endian ids of `dtype`, documents separated by end-of-text."""

    file: str
    split: Literal["train", "holdout"]
    dtype: str
    tokens: int
    sha256: str


class LedgerRecord(_Value):
    """The split ledger's size and how its near-duplicate signatures were made (a descendant must match)."""

    documents: int
    signing: dict[str, int]


class DatasetManifest(_Value):
    """What a prepared dataset holds. Fields a kind of dataset does not have are None (and not written):
    documents have `ledger`, `dtype` and `shards`; alignment records have `method`, `block_size` and
    `chat_template`. `files` is absent from datasets prepared before it was written."""

    modality: Literal["text"] = "text"  # a second modality is a new value here, its fields beside these
    kind: Literal["text", "chat", "preference"] = "text"  # documents, or alignment records of one shape
    method: str | None = None  # the alignment method the records were prepared for (sft, dpo)
    source: str
    source_digest: str
    source_skipped: dict[str, int]
    stats: dict[str, int]  # documents (or records) in, out, dropped by reason, per split; PII replaced
    holdout_fraction: float
    block_size: int | None = None  # alignment: records longer than the model's context were dropped
    ledger: LedgerRecord | None = None
    vocab_size: int
    eot_id: int
    dtype: str | None = None
    chat_template: dict[str, Any] | None = None  # models.chat.ChatTemplate.to_dict()
    shards: list[Shard] | None = None
    train_tokens: int
    holdout_tokens: int
    files: dict[str, str] | None = None  # every other file's xxh3-128, what hydration checks a copy against

    # Keys written only when they differ from what their absence means (see the module's docstring).
    _IMPLIED: ClassVar[dict[str, str]] = {"modality": "text", "kind": "text"}

    @field_validator("modality", mode="before")
    @classmethod
    def _known_modality(cls, value: object) -> object:
        if value != "text":
            raise ValueError(
                f"this dataset's modality is {value!r}; this version of foundry prepares, trains and evaluates "
                "text datasets only (modality 'text')"
            )
        return value

    # --- the file ------------------------------------------------------------------------------

    @classmethod
    def read(cls, where: Path) -> DatasetManifest:
        """From a dataset folder or its manifest file. A malformed or unknown manifest is a ValueError
        (pydantic's ValidationError is one) that names the file."""
        path = _file(where)
        raw = path.read_text()
        try:
            return cls.model_validate_json(raw)
        except ValueError as exc:
            raise ValueError(f"{path} is not a dataset manifest this version of foundry reads: {exc}") from exc

    def write(self, where: Path) -> Path:
        """Into a dataset folder (or to a file path); returns the file written."""
        import json

        path = _file(where)
        path.write_text(json.dumps(self.as_json(), indent=1))
        return path

    def as_json(self) -> dict[str, Any]:
        """The manifest as the JSON object its file holds, keys in the order they have always been written."""
        data = self.model_dump(mode="json")
        return {
            key: value
            for key, value in data.items()
            if value is not None and not (key in self._IMPLIED and value == self._IMPLIED[key])
        }

    # --- questions readers ask -------------------------------------------------------------------

    @property
    def is_documents(self) -> bool:
        """Documents for pretraining (token shards), rather than alignment records."""
        return self.kind == "text"

    @property
    def holdout_bytes(self) -> int:
        """UTF-8 bytes of the holdout documents: what bits per byte divide by."""
        return self.stats["holdout_bytes"]

    def count(self, name: str) -> int:
        """A count of what preparation kept or dropped (`train_docs`, `holdout_records`, ...)."""
        if name not in self.stats:
            raise KeyError(f"the manifest counts {', '.join(sorted(self.stats))}, not {name!r}")
        return self.stats[name]

    def tokens(self, split: str) -> int:
        return {"train": self.train_tokens, "holdout": self.holdout_tokens}[split]

    def shards_of(self, split: str) -> list[Shard]:
        """A split's shards that hold tokens, in order; [] for alignment records (they are not sharded)."""
        return [s for s in self.shards or [] if s.split == split and s.tokens]

    def checksums(self) -> tuple[dict[str, str], Callable[[Path], str]]:
        """{file: digest} of what the dataset holds, and the function that computes such a digest: every
        other file's xxh3-128, or, for datasets from before `files` was written, the shards' sha256."""
        if self.files is not None:
            return self.files, fast_digest
        return {s.file: s.sha256 for s in self.shards or []}, sha256_file

    def data_metrics(self) -> dict[str, float]:
        """The counts worth a chart in MLflow: documents in and out, drops by reason, PII replaced, tokens."""
        metrics = {f"data/{k}": v for k, v in self.stats.items()}
        metrics.update({f"data/source_{k}": v for k, v in self.source_skipped.items()})
        metrics["data/train_tokens"] = self.train_tokens
        metrics["data/holdout_tokens"] = self.holdout_tokens
        return metrics
