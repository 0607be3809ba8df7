"""Merging specialists: a merge's score on one holdout."""

from __future__ import annotations


def merge_score(holdout: str, merged: float, base: float, specialist: float | None):
    """A merge's score on one holdout, beside the base's and (on a specialist's own holdout) the specialist's."""
    from foundry.specialists.contracts import HoldoutScore

    return HoldoutScore(
        holdout_of=holdout,
        data_version="d",
        merged_bits_per_byte=merged,
        base_bits_per_byte=base,
        specialist_bits_per_byte=specialist,
    )
