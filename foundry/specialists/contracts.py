"""The typed values of merging specialists (flows/merge.py): holdout scores (the merge gate's inputs, in
`foundry.gates.inputs`) and the result."""

from __future__ import annotations

from foundry.core.contracts import _Value
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
        return f"models:/{self.model_name}/{self.model_version}"
