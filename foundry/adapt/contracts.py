"""The typed values of merging specialists (flows/merge.py): holdout scores, the gate's decision, the result."""

from __future__ import annotations

from foundry.contracts import _Value


class HoldoutScore(_Value):
    """The merge, the base and (on its own holdout) a specialist, scored on one model's holdout."""

    holdout_of: str  # models:/NAME/VERSION whose holdout this is
    data_version: str
    merged_bits_per_byte: float
    base_bits_per_byte: float
    specialist_bits_per_byte: float | None = None  # None on the base's own holdout


class MergeDecision(_Value):
    """The merge gate: better than the base on every parent's holdout, within `max_gap` of each specialist."""

    passed: bool
    make_champion: bool
    verdict: str
    max_gap: float
    scores: list[HoldoutScore]  # one per parent, then the base's own holdout

    def tags(self) -> dict[str, str]:
        return {
            "gate.verdict": self.verdict,
            "gate.passed": str(self.passed).lower(),
            "gate.max_gap": str(self.max_gap),
        }


class MergeResult(_Value):
    """What the merge flow returns and `foundry merge` prints."""

    run_id: str
    model_name: str
    model_version: str
    method: str
    base: str
    parents: list[str]
    decision: MergeDecision
    promoted: bool

    @property
    def model_uri(self) -> str:
        return f"models:/{self.model_name}/{self.model_version}"
