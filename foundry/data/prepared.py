"""What a workload's `prepare` made, as one typed value: the dataset's manifest and its counts against a parent.

Every workload's data stage returns it (documents: `foundry.pretrain.prepare`; chat records and images: theirs).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from foundry.data.manifest import DatasetManifest


class Prepared(BaseModel):
    """What `prepare` made: the dataset's manifest (as written to its folder) and, when it builds on a
    parent's ledger, the counts against it (`Lineage` in `foundry.data.ledger`), which are not written."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    manifest: DatasetManifest
    lineage: dict[str, int] = {}
