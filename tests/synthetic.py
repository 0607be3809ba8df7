"""A small corpus of random word soup: every document passes the quality rules, none duplicates another."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = (
    "river stone light cloud forest engine paper window silver garden motion harbor "
    "lantern meadow copper thunder violet marble anchor pepper orbit ladder"
).split()


def synthetic_docs(n: int, seed: int = 0, words: int = 60) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) + f"\nthe end of document {i}\n" for i in range(n)]


def overrides(root: Path, *extra: str) -> list[str]:
    """A config for the corpus at `root` small enough for a unit test."""
    return [
        f"data.source={root}",
        "data.holdout_fraction=0.3",
        "tokenizer.vocab_size=300",
        "model.block_size=16",
        *extra,
    ]


def prepare_synthetic(base: Path, n: int = 40):
    """`n` documents written under `base/corpus` and prepared into `base/prepared`: (config, folder, manifest)."""
    from foundry.config import load_config
    from foundry.core.preparing import Preparing
    from foundry.data.acquire import acquire_source
    from foundry.pretrain.prepare import prepare

    root = base / "corpus"
    root.mkdir()
    for i, text in enumerate(synthetic_docs(n)):
        (root / f"doc{i:02d}.txt").write_text(text)
    config = load_config(None, overrides(root))
    prepare(Preparing(acquire_source(config.data, base / "source_manifest.json"), config, base / "prepared"))
    manifest = json.loads((base / "prepared" / "manifest.json").read_text())  # as written (no lineage counts)
    return config, base / "prepared", manifest
