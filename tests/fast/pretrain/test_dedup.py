"""foundry.pretrain.dedup and its place in clean: exact and near duplicates, first copy wins, none crosses the split."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from foundry.config import DataConfig
from foundry.core.contracts import SourceFile
from foundry.pretrain import clean
from foundry.pretrain.clean import clean_documents, iter_texts, normalise
from foundry.pretrain.dedup import Deduplicator, Signer, shingles

WORDS = ["".join(chr(97 + (i // 26**k) % 26) for k in range(3)) for i in range(400)]
LOOSE = dict(min_chars=20, max_repeated_line_fraction=1)


def text(seed: int, n: int = 300) -> str:
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(10)) for _ in range(n // 10)]
    return "\n".join(lines) + "\n"


def edit(doc: str, changes: int, seed: int = 0) -> str:
    """The document with `changes` words replaced: a near duplicate when changes are few."""
    rng = random.Random(seed)
    words = doc.split(" ")
    for i in rng.sample(range(len(words)), changes):
        words[i] = "CHANGED"
    return " ".join(words)


def jaccard(a: str, b: str, width: int = 5) -> float:
    x, y = set(shingles(a, width)), set(shingles(b, width))
    return len(x & y) / len(x | y)


def test_shingles():
    assert shingles("a b c d e f", 5) == [b"a b c d e", b"b c d e f"]
    assert shingles("a  b\n\tc", 2) == [b"a b", b"b c"]
    assert shingles("a b", 5) == [b"a b"]
    assert shingles("", 3) == [b""]


def test_signatures_estimate_jaccard():
    signer = Signer(DataConfig(near_dup_num_perm=256))
    a, b = text(1), edit(text(1), 15)
    estimate = float(np.mean(signer(a) == signer(b)))
    assert abs(estimate - jaccard(a, b)) < 0.1
    assert np.array_equal(signer(a), Signer(DataConfig(near_dup_num_perm=256))(a))  # fixed permutations
    assert signer(a).dtype == np.uint32 and signer(a).shape == (256,)


def test_deduplicator_first_copy_wins():
    cfg = DataConfig(near_dup_threshold=0.8)
    signer, dedup = Signer(cfg), Deduplicator(cfg)
    original, near, other = text(1), edit(text(1), 3), text(2)
    assert jaccard(original, near) > 0.9 and jaccard(original, other) < 0.1
    sha = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
    assert dedup.check(sha(original), signer(original), "a") == (None, "")
    assert dedup.check(sha(original), signer(original), "b") == ("exact_duplicate", "a")
    assert dedup.check(sha(near), signer(near), "c") == ("near_duplicate", "a")
    assert dedup.check(sha(other), signer(other), "d") == (None, "")


@pytest.mark.parametrize("threshold, dropped", [(0.7, 1), (0.95, 0), (1, 0)])
def test_threshold_is_configurable(tmp_path, threshold, dropped):
    a, b = text(1), edit(text(1), 8)
    assert 0.75 < jaccard(a, b) < 0.95
    for name, body in (("a.txt", a), ("b.txt", b)):
        (tmp_path / name).write_text(body)
    entries = [SourceFile(path=str(tmp_path / n), name=n, size=0, sha256="") for n in ("a.txt", "b.txt")]
    stats = clean_documents(
        entries, DataConfig(**LOOSE, near_dup_threshold=threshold), tmp_path / "out", progress=False
    )
    assert stats.dropped["near_duplicate"] == dropped and stats.docs_out == 2 - dropped


@pytest.mark.parametrize("block", [clean.SIGNATURE_BLOCK, 4])  # 4: signatures read in 23 blocks
def test_no_duplicate_crosses_train_and_holdout(tmp_path, monkeypatch, block):
    """Families of near copies: one of each survives, so none can sit on both sides of the split."""
    monkeypatch.setattr(clean, "SIGNATURE_BLOCK", block)
    src = tmp_path / "src"
    src.mkdir()
    names = []
    for family in range(30):
        for copy in range(3):
            name = f"f{family:02d}_{copy}.txt"
            (src / name).write_text(text(family) if copy == 0 else edit(text(family), 2 * copy, seed=copy))
            names.append(name)
    (src / "exact.txt").write_text(text(5))
    entries = [SourceFile(path=str(src / n), name=n, size=0, sha256="") for n in [*names, "exact.txt"]]
    stats = clean_documents(entries, DataConfig(**LOOSE, holdout_fraction=0.3), tmp_path / "out", progress=False)
    assert stats.docs_out == 30
    assert stats.dropped["near_duplicate"] == 60 and stats.dropped["exact_duplicate"] == 1
    train = list(iter_texts(tmp_path / "out" / "train.jsonl"))
    holdout = list(iter_texts(tmp_path / "out" / "holdout.jsonl"))
    assert holdout and train
    assert max(jaccard(h, t) for h in holdout for t in train) < 0.2
    assert set(train + holdout) == {normalise(text(f)) for f in range(30)}  # the first copy of each family


def test_threshold_bounds():
    with pytest.raises(ValueError, match="at most 0.95, or 1"):
        DataConfig(near_dup_threshold=0.99)
    with pytest.raises(ValueError):
        DataConfig(near_dup_num_perm=32)
