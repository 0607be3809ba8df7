"""De-duplication: exact by content hash, near by MinHash LSH (datasketch) over word shingles.

Signatures are computed per document in the partition step (parallel); the decisions are global
and taken in corpus order, first copy wins, so they are the same however the corpus was split
into partitions. Memory grows with the number of kept documents (a hash and a signature each,
about 0.6 KB with 128 permutations), not with their size.
"""

from __future__ import annotations

import zlib

import numpy as np

from foundry.config import DataConfig

SEED = 1
SCHEME = "affine32"


def shingles(text: str, width: int) -> list[bytes]:
    """Overlapping runs of `width` words (split at ASCII whitespace); a shorter document is one shingle."""
    words = text.encode().split()
    if len(words) <= width:
        return [b" ".join(words)]
    return [b" ".join(run) for run in zip(*(words[i:] for i in range(width)))]


class Signer:
    """MinHash signatures with fixed permutations. crc32 hashes the shingles: unlike Python's `hash`
    it is the same in every process, and it is several times faster than datasketch's default SHA-1."""

    def __init__(self, cfg: DataConfig):
        from datasketch import MinHash

        self._minhash = MinHash
        self.num_perm, self.width = cfg.near_dup_num_perm, cfg.near_dup_shingle_words
        self.permutations = MinHash(num_perm=self.num_perm, seed=SEED, scheme=SCHEME).permutations

    def __call__(self, text: str) -> np.ndarray:
        m = self._minhash(
            num_perm=self.num_perm, seed=SEED, hashfunc=zlib.crc32, permutations=self.permutations, scheme=SCHEME
        )
        m.update_batch(shingles(text, self.width))
        return np.asarray(m.hashvalues, dtype=np.uint32)


class Deduplicator:
    """Decides, document after document, whether each repeats (exactly or nearly) one kept earlier."""

    def __init__(self, cfg: DataConfig):
        from datasketch import MinHash, MinHashLSH

        self._minhash = MinHash
        self.threshold, self.num_perm = cfg.near_dup_threshold, cfg.near_dup_num_perm
        self.near = self.threshold < 1  # 1: exact duplicates only
        # Bands tuned to miss few near duplicates (weights: false positives 0.05, false negatives 0.95):
        # a false candidate costs one comparison of signatures below, a miss a duplicate kept.
        self.lsh = (
            MinHashLSH(threshold=self.threshold, num_perm=self.num_perm, weights=(0.05, 0.95)) if self.near else None
        )
        self.exact: dict[str, str] = {}  # content hash -> the kept document's name
        self.kept: list[tuple[str, np.ndarray]] = []  # (name, signature) by LSH key
        self.ledger: set[str] = set()  # content hashes an earlier data version kept
        # Given once: without them each MinHash below draws its own (the same) permutations, which took
        # more than a third of de-duplicating 158 MB.
        self.permutations = MinHash(num_perm=self.num_perm, seed=SEED, scheme=SCHEME).permutations

    def _sketch(self, signature: np.ndarray):
        return self._minhash(hashvalues=signature, permutations=self.permutations, seed=SEED, scheme=SCHEME)

    def seed(self, sha256: str, signature: np.ndarray, name: str) -> None:
        """A document an earlier data version kept (the parent's ledger): it comes first, wherever it now sits
        in corpus order, so a new document that repeats it is the duplicate, and it is kept when it comes."""
        self.ledger.add(sha256)
        if self.near and signature.any():  # all zero: a document of a version prepared before signatures
            self.lsh.insert(len(self.kept), self._sketch(signature))
            self.kept.append((f"{name} (an earlier data version)", signature))

    def check(self, sha256: str, signature: np.ndarray, name: str) -> tuple[str | None, str]:
        """(None, "") to keep the document, else (rule, the earlier document it repeats)."""
        if sha256 in self.exact:
            return "exact_duplicate", self.exact[sha256]
        if sha256 in self.ledger or not self.near:  # a seeded document is itself, not its own duplicate
            self.exact[sha256] = name
            return None, ""
        m = self._sketch(signature)
        # LSH proposes candidates; the signatures' agreement (the Jaccard estimate) confirms them.
        for key in sorted(self.lsh.query(m)):
            other_name, other = self.kept[key]
            if float(np.mean(other == signature)) >= self.threshold:
                return "near_duplicate", other_name
        self.exact[sha256] = name
        self.lsh.insert(len(self.kept), m, check_duplication=False)
        self.kept.append((name, signature.copy()))  # a view would hold on to its whole block of signatures
        return None, ""
