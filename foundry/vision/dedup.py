"""Which decoded images are kept: exact and near duplicates and images under two labels go, first copy wins.

Decisions are taken in listing order, after the parent's ledger is seeded (as for text in
`foundry.pretrain.clean`): an image an earlier data version assigned comes first wherever it now sits, so a new
copy of it is the duplicate and the old one keeps its split. Removing every near copy before the split is
what keeps near copies of a holdout image out of train: no two kept images are within the distance.
A copy (exact or near) under another label than the kept image it repeats is a label conflict: both go,
since neither label can be trusted; the kept one's hash stays, so later copies still go too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from foundry.data.ledger import Ledger
from foundry.vision.neardup import NearIndex, from_words


@dataclass
class Candidate:
    sha256: str
    bits: np.ndarray  # the dHash
    label: str
    name: str


@dataclass(slots=True)
class _Kept:
    name: str
    label: str | None  # None: a ledger image not (yet) met in this version's sources
    present: bool
    conflict: str = ""  # the name of the other-label copy that made it ambiguous


class Deduplicator:
    def __init__(self, bits: int, distance: int):
        self.bits = bits
        self.index = NearIndex(bits, distance)
        self.kept: dict[str, _Kept] = {}
        self.order: list[str] = []  # shas of images met in this version, kept when decided

    def seed(self, ledger: Ledger) -> None:
        """The parent's images, in ledger order, ahead of every new one."""
        for sha, name, words in zip(ledger.shas, ledger.names, ledger.signatures):
            self.kept[sha] = _Kept(f"{name} (an earlier data version)", None, False)
            self.index.add(from_words(words, self.bits), sha)

    def check(self, image: Candidate) -> tuple[str, str]:
        """("", "") to keep `image`, else (reason, what it repeats)."""
        sha = image.sha256
        other = sha if sha in self.kept else None
        if other is not None and not self.kept[other].present and self.kept[other].label is None:
            self.kept[other] = _Kept(image.name, image.label, True)  # a ledger image, met again: itself
            self.order.append(sha)
            return "", ""
        rule = "exact_duplicate"
        if other is None and (near := self.index.nearest(image.bits)) is not None:
            other, rule = near[0], "near_duplicate"
        if other is None:
            self.kept[sha] = _Kept(image.name, image.label, True)
            self.index.add(image.bits, sha)
            self.order.append(sha)
            return "", ""
        first = self.kept[other]
        if first.label is not None and first.label != image.label:
            first.conflict = first.conflict or image.name
            return "label_conflict", f"{rule.replace('_', ' ')} of {first.name} labelled {first.label!r}"
        return rule, f"repeats {first.name}"

    def survivors(self) -> list[str]:
        """Shas of the images kept, in the order met; a kept image in a label conflict is not one."""
        return [sha for sha in self.order if not self.kept[sha].conflict]

    def conflicted(self) -> list[tuple[str, str, str]]:
        """(sha, name, other-label copy) of kept images dropped for a label conflict."""
        return [(sha, self.kept[sha].name, self.kept[sha].conflict) for sha in self.order if self.kept[sha].conflict]
