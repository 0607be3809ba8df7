"""Sticky splits: every data version carries the ledger of which split each document was given.

`ledger.csv` (sha256, split, name) and `ledger_minhash.npy` (the documents' MinHash signatures, row
for row) list every document any ancestor data version assigned, then the ones this version added.
A data version built on a parent's ledger keeps every listed document in the split the ledger gives
it, whether or not the document is still in the source; only documents the ledger does not list are
split, by the content-hash rule, and they are de-duplicated against the ledger first. So a document
that trained any ancestor never enters a holdout, and a holdout document never trains.

Retraining (`Lineage.replay_fraction`) writes the new training documents and a replay sample of the
old ones to the train split; the ledger still lists them all.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from foundry.config import DataConfig
from foundry.core.digests import fast_digest
from foundry.data.manifest import DatasetManifest

LEDGER = "ledger.csv"
SIGNATURES = "ledger_minhash.npy"


class LedgerMismatch(ValueError):
    """The parent's ledger was signed with other near-duplicate settings than this config's."""


@dataclass
class Ledger:
    shas: list[str] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the document where it was first assigned
    signatures: np.ndarray | None = None  # (documents, num_perm) uint32

    @property
    def split_of(self) -> dict[str, str]:
        return dict(zip(self.shas, self.splits))

    def __len__(self) -> int:
        return len(self.shas)

    @classmethod
    def read(cls, folder: Path, num_perm: int) -> Ledger:
        """The ledger a data version carries. One prepared before ledgers existed gives its `documents.csv`,
        unsigned (all-zero rows): later documents are then de-duplicated against it exactly, not nearly."""
        if not (folder / LEDGER).is_file():
            with open(folder / "documents.csv", encoding="utf-8", newline="") as fh:
                rows = [{"sha256": r["sha256"], "split": r["split"], "name": r["source"]} for r in csv.DictReader(fh)]
            return cls(
                [r["sha256"] for r in rows],
                [r["split"] for r in rows],
                [r["name"] for r in rows],
                np.zeros((len(rows), num_perm), np.uint32),
            )
        with open(folder / LEDGER, encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        signatures = np.load(folder / SIGNATURES)
        if len(signatures) != len(rows):
            raise ValueError(f"{folder}: {len(rows)} ledger rows but {len(signatures)} signatures")
        return cls([r["sha256"] for r in rows], [r["split"] for r in rows], [r["name"] for r in rows], signatures)

    def extended(self, rows: list[tuple[str, str, str, np.ndarray]], num_perm: int) -> Ledger:
        """This ledger, then (sha256, split, name, signature) rows for documents it did not list."""
        added = np.stack([r[3] for r in rows]).astype(np.uint32) if rows else np.zeros((0, num_perm), np.uint32)
        return self.appended([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], added)

    def appended(self, shas: list[str], splits: list[str], names: list[str], signatures: np.ndarray) -> Ledger:
        """This ledger, then documents it did not list, their signatures one row each of `signatures`."""
        before = self.signatures if self.signatures is not None else np.zeros((0, signatures.shape[1]), np.uint32)
        return Ledger(self.shas + shas, self.splits + splits, self.names + names, np.concatenate([before, signatures]))

    def write(self, folder: Path) -> None:
        with open(folder / LEDGER, "w", encoding="utf-8", newline="") as fh:
            rows = csv.writer(fh)
            rows.writerow(["sha256", "split", "name"])
            rows.writerows(zip(self.shas, self.splits, self.names))
        np.save(folder / SIGNATURES, self.signatures)


def signing(cfg: DataConfig) -> dict[str, int]:
    """The settings a ledger's signatures depend on; a descendant must sign its documents the same way."""
    return {"num_perm": cfg.near_dup_num_perm, "shingle_words": cfg.near_dup_shingle_words}


def check_signing(parent_manifest: DatasetManifest, cfg: DataConfig) -> None:
    """Data versions from before the manifest recorded its ledger's signing are taken as signed this way."""
    recorded = parent_manifest.ledger.signing if parent_manifest.ledger else None
    if recorded is not None and recorded != signing(cfg):
        raise LedgerMismatch(
            f"the parent data version's ledger was signed with {recorded}, this config signs with "
            f"{signing(cfg)}: keep data.near_dup_num_perm and data.near_dup_shingle_words for its descendants"
        )


def identity(folder: Path | None) -> str:
    """What names a ledger for the dataset cache key: its files' digests ('' for none)."""
    if folder is None:
        return ""
    names = (LEDGER, SIGNATURES) if (folder / LEDGER).is_file() else ("documents.csv",)
    return hashlib.sha256("".join(fast_digest(folder / name) for name in names).encode()).hexdigest()


@dataclass(frozen=True)
class Lineage:
    """What a new data version builds on: the parent's ledger and, for a retrain, the replay share."""

    ledger: Ledger
    replay_fraction: float | None = None  # None: every training document; else the new ones and a sample
    salt: str = ""  # the parent ledger's identity: each parent replays its own sample

    def replayed(self, sha: str) -> bool:
        """Whether an old training document is replayed: a draw by the hash of its content hash and the salt,
        the same for the same parent and corpus."""
        if self.replay_fraction is None:
            return True
        draw = int(hashlib.sha256(f"{self.salt}:{sha}".encode()).hexdigest()[:8], 16)
        return draw < self.replay_fraction * 0x1_0000_0000


def holdout_set(docs: list[tuple[str, int]], fraction: float, sticky: dict[str, str] | None = None) -> set[str]:
    """The holdout: documents the ledger (`sticky`) puts there, plus new documents with the smallest content
    hashes until the holdout holds at least `fraction` of all bytes and of the new documents' bytes.

    A threshold on each hash (a document in the holdout with probability `fraction`) would give a share that
    fluctuates around the fraction, often below it with few documents; this keeps the split content-addressed
    and guarantees the share. Documents the ledger lists never move. Without any training document the last
    new one stays in training."""
    sticky = sticky or {}
    total = sum(size for _, size in docs)
    held = {sha for sha, _ in docs if sticky.get(sha) == "holdout"}
    held_bytes = sum(size for sha, size in docs if sha in held)
    new = sorted((sha, size) for sha, size in docs if sha not in sticky)
    need = max(fraction * total - held_bytes, fraction * sum(size for _, size in new))
    has_train = any(sticky.get(sha) == "train" for sha, _ in docs)
    chosen: set[str] = set()
    for sha, size in new if has_train else new[:-1]:
        if need <= 0:
            break
        chosen.add(sha)
        need -= size
    return held | chosen
