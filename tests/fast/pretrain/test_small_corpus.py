"""A corpus too small to split fails with one plain message before any expectation runs (#30 point 8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic import synthetic_docs

from foundry.config import load_config
from foundry.core.preparing import Preparing
from foundry.data.acquire import acquire_source
from foundry.pretrain.prepare import prepare


def corpus(root: Path, docs: list[str]) -> Path:
    root.mkdir(parents=True)
    for i, text in enumerate(docs):
        (root / f"doc{i}.txt").write_text(text)
    return root


def test_one_document_asks_for_two(tmp_path):
    root = corpus(tmp_path / "one", synthetic_docs(1))
    config = load_config(None, [f"data.source={root}"])
    source = acquire_source(config.data, tmp_path / "source_manifest.json")
    with pytest.raises(ValueError, match=r"^need at least two documents, .*: 1 of 1 documents from"):
        prepare(Preparing(source, config, tmp_path / "prepared"))


def test_two_documents_split_one_each_way(tmp_path):
    root = corpus(tmp_path / "two", synthetic_docs(2))
    config = load_config(None, [f"data.source={root}", "tokenizer.vocab_size=300"])
    source = acquire_source(config.data, tmp_path / "source_manifest.json")
    prepared = prepare(Preparing(source, config, tmp_path / "prepared"))
    assert (prepared.manifest.stats["train_docs"], prepared.manifest.stats["holdout_docs"]) == (1, 1)
