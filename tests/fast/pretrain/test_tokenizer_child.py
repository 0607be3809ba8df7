"""A large tokenizer sample trains in a child process (its memory leaves with it) and makes the same bytes as
training in the preparing process; a failed child is an error naming it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from synthetic import synthetic_docs

import foundry.pretrain.prepare as prep
from foundry.config import load_config
from foundry.core.preparing import Preparing
from foundry.data.acquire import acquire_source


def prepared_files(tmp_path: Path, name: str) -> dict[str, str]:
    root = tmp_path / "corpus"
    if not root.exists():
        root.mkdir()
        for i, text in enumerate(synthetic_docs(40)):
            (root / f"doc{i}.txt").write_text(text)
    config = load_config(None, [f"data.source={root}", "tokenizer.vocab_size=300"])
    source = acquire_source(config.data, tmp_path / f"{name}.json")
    out = tmp_path / name
    prep.prepare(Preparing(source, config, out))
    return {str(f.relative_to(out)): hashlib.sha256(f.read_bytes()).hexdigest() for f in out.rglob("*") if f.is_file()}


def test_a_tokenizer_trained_in_a_child_process_gives_the_same_bytes(tmp_path, monkeypatch):
    children = []
    run = prep.subprocess.run
    monkeypatch.setattr(prep.subprocess, "run", lambda *a, **k: children.append(a[0]) or run(*a, **k))
    here = prepared_files(tmp_path, "here")
    assert children == []  # a small sample trains in this process
    monkeypatch.setattr(prep, "CHILD_SAMPLE_BYTES", 0)
    child = prepared_files(tmp_path, "child")
    assert len(children) == 1 and "tokenizer.json" in here and child == here


def test_a_failed_child_is_an_error_with_its_stderr(tmp_path, monkeypatch):
    monkeypatch.setattr(prep, "CHILD_SAMPLE_BYTES", 0)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "nothing"))  # the child's start fails, this process is as it was
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "sitecustomize.py").write_text("raise SystemExit('no tokenizer here')\n")
    with pytest.raises(
        RuntimeError, match="(?s)training the tokenizer in a child process failed:\n.*no tokenizer here"
    ):
        prepared_files(tmp_path, "failed")
