"""A prepared dataset's `manifest.json`, as one typed value that owns the file.

Every prepared dataset (documents for pretraining, chat or preference records for alignment) describes
itself in its `manifest.json`: where it came from, what cleaning kept, the tokenizer's size, the token
counts, and each other file's digest. `DatasetManifest` reads and writes that file; readers ask it
questions (`shards_of`, `holdout_bytes`, `checksums`) instead of reaching into the JSON.

The file's bytes are the data version's (DVC hashes the folder): `write` gives, for the same values, the
bytes `json.dumps(..., indent=1)` gave before this class existed, and keys a manifest did not have then
(`modality`, `kind` of a document dataset) are left out while they hold what their absence meant.

An image dataset (modality "image", kind "classification") has no tokens: its `classes`, `image_shape`,
`image_counts` and `shard_manifest` (the `shards.json` of `foundry.vision.shards`) stand where a text dataset has
`vocab_size`, `eot_id`, `train_tokens` and `holdout_tokens`. Each side's fields are absent (not written) on the
other, and reading one of them there raises `WrongModality` rather than returning None. Those fields are each
modality's own, named in its workload's registration (`Registration.manifest`: `foundry.pretrain.fields`,
`foundry.vision.fields`) and placed among the shared ones where they have always been written
(`foundry.core.extended`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from pydantic import field_validator, model_validator

from foundry.core.contracts import _Value
from foundry.core.digests import fast_digest, sha256_file
from foundry.core.extended import Added, extended, fields_of, imported
from foundry.core.registrations import kinds, listed, modalities, modality_of_kind

FILE = "manifest.json"
TOKENIZER = "tokenizer.json"
SPLITS = ("train", "holdout")


# The modality of each kind of dataset, as the workloads are registered (`foundry.core.registrations`): documents and
# alignment records are text, labelled images are images.
MODALITY_OF_KIND = modality_of_kind()
MODALITIES = Literal[modalities()]  # type: ignore[misc]
KINDS = Literal[kinds()]  # type: ignore[misc]


class WrongModality(ValueError):
    """A reader asked a dataset for a field its modality does not have (tokens of images, classes of text)."""


def _file(where: Path) -> Path:
    """A dataset folder's manifest, or `where` itself when it names a .json file."""
    path = Path(where)
    return path if path.suffix == ".json" else path / FILE


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


class _SharedFields(_Value):
    """The fields every dataset's manifest may have, whatever its modality: `DatasetManifest`'s, with each registered
    modality's own fields in their places (`foundry.core.extended`)."""

    modality: MODALITIES = "text"  # type: ignore[valid-type]
    # documents, alignment records of one shape, or labelled images
    kind: KINDS = "text"  # type: ignore[valid-type]
    method: str | None = None  # the alignment method the records were prepared for (sft, dpo)
    source: str
    source_digest: str
    source_skipped: dict[str, int]
    stats: dict[str, int]  # documents (or records) in, out, dropped by reason, per split; PII replaced
    holdout_fraction: float
    block_size: int | None = None  # alignment: records longer than the model's context were dropped
    ledger: LedgerRecord | None = None
    dtype: str | None = None
    chat_template: dict[str, Any] | None = None  # models.chat.ChatTemplate.to_dict()
    shards: list[Shard] | None = None
    files: dict[str, str] | None = None  # every other file's xxh3-128, what hydration checks a copy against


class _ManifestRules(_Value):
    """`DatasetManifest`'s rules and methods; its fields are `_SharedFields`' and each modality's own."""

    # Keys written only when they differ from what their absence means (see the module's docstring).
    _IMPLIED: ClassVar[dict[str, str]] = {"modality": "text", "kind": "text"}

    @field_validator("modality", mode="before", check_fields=False)
    @classmethod
    def _known_modality(cls, value: object) -> object:
        if value not in (known := get_args(MODALITIES)):
            raise ValueError(
                f"this dataset's modality is {value!r}; this version of foundry prepares, trains and evaluates "
                f"{' and '.join(known)} datasets only (modality {' or '.join(map(repr, known))})"
            )
        return value

    @model_validator(mode="after")
    def _fields_of_its_modality(self) -> _ManifestRules:
        values = self.__dict__  # plain reads: the guarded attributes raise on the other modality's fields
        mine = [name for name, of in _MODALITY_OF.items() if of == values["modality"]]
        theirs = [name for name, of in _MODALITY_OF.items() if of != values["modality"]]
        if missing := [name for name in mine if values[name] is None]:
            raise ValueError(f"the manifest of a {values['modality']!r} dataset needs {', '.join(missing)}")
        if extra := [name for name in theirs if values[name] is not None]:
            raise ValueError(f"the manifest of a {values['modality']!r} dataset has no {', '.join(extra)}")
        if MODALITY_OF_KIND[values["kind"]] != values["modality"]:
            raise ValueError(f"kind {values['kind']!r} does not go with modality {values['modality']!r}")
        return self

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if value is None and name in _MODALITY_OF:
            modality = super().__getattribute__("modality")
            raise WrongModality(
                f"{name} is a field of {_MODALITY_OF[name]} datasets; this dataset's modality is {modality!r} "
                "(ask the manifest's modality first: an image dataset has classes and image_shape, no tokens)"
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
        """The counts of every dataset worth a chart in MLflow: documents (images) in and out, drops by reason, PII
        replaced, source files skipped. A workload adds its own (tokens, classes: `Workload.data_metrics`)."""
        metrics = {f"data/{k}": v for k, v in self.stats.items()}
        metrics.update({f"data/source_{k}": v for k, v in self.source_skipped.items()})
        return metrics


def _modality_fields() -> list[tuple[str, Added]]:
    """Each registered modality's own fields (`Registration.manifest`), with its modality. Each is None on a dataset
    of another modality, so each defaults to None."""
    owned = [
        (registration.modality, added)
        for registration in listed()
        if registration.manifest
        for added in fields_of(imported(registration.manifest))
    ]
    if defaulted := [added.name for _, added in owned if added.info.default is not None]:
        raise TypeError(f"manifest fields {', '.join(defaulted)} must default to None: other modalities lack them")
    return owned


_OWN_FIELDS = _modality_fields()
# The fields of one modality only: reading one on a dataset of another raises (`DatasetManifest.__getattribute__`).
_MODALITY_OF = {added.name: modality for modality, added in _OWN_FIELDS}

DatasetManifest = extended(
    "DatasetManifest",
    _ManifestRules,
    _SharedFields,
    [added for _, added in _OWN_FIELDS],
    "files",
    doc="""What a prepared dataset holds. Fields a kind of dataset does not have are None (and not written):
    documents have `ledger`, `dtype` and `shards`; alignment records have `method`, `block_size` and
    `chat_template`. `files` is absent from datasets prepared before it was written.""",
)
