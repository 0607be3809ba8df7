"""The typed values of merging specialists (flows/merge.py): holdout scores (the merge gate's inputs, in
`foundry.gates.inputs`) and the result."""

from __future__ import annotations

from foundry.core.contracts import _Value
from foundry.core.model_uri import ModelUri
from foundry.gates.decision import Decision
from foundry.gates.inputs import HoldoutScore

__all__ = ["HoldoutScore", "MergeResult"]


class MergeResult(_Value):
    """What the merge flow returns and `foundry merge` prints."""

    run_id: str
    model_name: str
    model_version: str
    method: str
    base: str
    parents: list[str]
    decision: Decision
    promoted: bool

    @property
    def model_uri(self) -> str:
        return str(ModelUri(name=self.model_name, version=self.model_version))
