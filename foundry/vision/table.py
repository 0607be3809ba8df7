"""The staged image set's typed values: one row per kept image (`images.csv`) and the audit (`audit.json`)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TABLE = "images.csv"
AUDIT = "audit.json"
NAMED = 50  # names kept per drop reason; the count is always whole


@dataclass(frozen=True, slots=True)
class ImageRow:
    """One kept image. A dataclass with slots: as a pydantic model a row took ~1 KB, 50 MB at 50,000 images."""

    path: str  # relative to the staged folder: images/<sha[:2]>/<sha>.png
    label: str
    sha256: str  # of the fitted pixels (with their shape): the ledger's key
    width: int
    height: int
    channels: Literal[1, 3]
    split: Literal["train", "holdout"]
    source: str  # the name it had in its source

    def __post_init__(self) -> None:
        if self.channels not in (1, 3):
            raise ValueError(f"{self.path}: channels must be 1 or 3, not {self.channels!r}")
        if self.split not in ("train", "holdout"):
            raise ValueError(f"{self.path}: split must be train or holdout, not {self.split!r}")


COLUMNS = [column.name for column in fields(ImageRow)]


class Dropped(BaseModel):
    model_config = ConfigDict(extra="forbid")

    images: int = 0
    named: list[str] = Field(default_factory=list)  # the first NAMED, with why where it helps


class ImageAudit(BaseModel):
    """What went in, what was kept, and why the rest was not; metadata stripped, per kind, in images."""

    model_config = ConfigDict(extra="forbid")

    images_in: int = 0
    images_out: int = 0
    dropped: dict[str, Dropped] = Field(default_factory=dict)
    stripped: dict[str, int] = Field(default_factory=dict)
    splits: dict[str, int] = Field(default_factory=dict)
    labels: dict[str, int] = Field(default_factory=dict)  # kept images per label
    lineage: dict[str, int] = Field(default_factory=dict)  # counts against the parent's ledger

    def drop(self, reason: str, name: str, detail: str = "") -> None:
        entry = self.dropped.setdefault(reason, Dropped())
        entry.images += 1
        if len(entry.named) < NAMED:
            entry.named.append(f"{name}: {detail}" if detail else name)

    def names(self, reason: str) -> list[str]:
        """The named entries of one reason, without their details."""
        return [n.split(": ", 1)[0] for n in self.dropped[reason].named] if reason in self.dropped else []

    def write(self, folder: Path) -> None:
        (folder / AUDIT).write_text(json.dumps(self.model_dump(), indent=1, ensure_ascii=False) + "\n")

    @classmethod
    def read(cls, folder: Path) -> ImageAudit:
        return cls.model_validate_json((folder / AUDIT).read_text())


def write_table(rows: list[ImageRow], folder: Path) -> None:
    with open(folder / TABLE, "w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(COLUMNS)
        out.writerows([getattr(row, column) for column in COLUMNS] for row in rows)


def read_table(folder: Path) -> list[ImageRow]:
    with open(folder / TABLE, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    numbers = ("width", "height", "channels")
    for row in rows:
        if list(row) != COLUMNS:
            raise ValueError(f"{folder / TABLE}: columns {list(row)}, expected {COLUMNS}")
    return [ImageRow(**{**row, **{key: int(row[key]) for key in numbers}}) for row in rows]


def stage_table(audit: ImageAudit) -> list[dict]:
    """The image data stage in rows a person scans: images in and kept, drops by reason, metadata stripped by kind,
    images per split and per label (the run page's data-stage table, as text's `foundry.data.audit.stage_table`)."""
    rows = [{"what": "images in", "reason": "", "images": audit.images_in}]
    rows.append({"what": "images kept", "reason": "", "images": audit.images_out})
    rows += [{"what": "dropped", "reason": r, "images": d.images} for r, d in sorted(audit.dropped.items())]
    rows += [{"what": "metadata stripped", "reason": kind, "images": n} for kind, n in sorted(audit.stripped.items())]
    rows += [{"what": "split", "reason": split, "images": n} for split, n in audit.splits.items()]
    return rows + [{"what": "label", "reason": label, "images": n} for label, n in sorted(audit.labels.items())]


def stage_summary(audit: ImageAudit) -> str:
    dropped = ", ".join(f"{r} {d.images}" for r, d in sorted(audit.dropped.items())) or "none"
    stripped = ", ".join(f"{kind} {n}" for kind, n in sorted(audit.stripped.items())) or "none"
    return (
        f"data: kept {audit.images_out} of {audit.images_in} images in {len(audit.labels)} classes; "
        f"dropped by reason: {dropped}; metadata stripped: {stripped}"
    )


def merged_classes(base: list[str], labels) -> list[str]:
    """The base's classes in their order, then the labels it lacks, sorted (a fine-tune only adds classes)."""
    return list(base) + sorted(set(labels) - set(base))
