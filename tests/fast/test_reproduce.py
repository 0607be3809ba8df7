"""Reproduction needs the code that trained the model: the dirty flag (a real git repo) and the refusal."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from foundry.contracts import LineageRecord
from foundry.registry.lineage import CommitMismatch, check_commit
from foundry.tracking import git_state


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture()
def checkout(tmp_path) -> Path:
    """A committed checkout of the project's shape, with an ignore file as the project has."""
    root = tmp_path / "repo"
    for name in ("foundry/a.py", "models/b.py", "tests/test_a.py", "README.md", "dvc.yaml", ".gitignore"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("__pycache__/\n" if name == ".gitignore" else f"{name}\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    return root


def test_the_dirty_flag_counts_changes_and_untracked_files_under_the_code_paths(checkout):
    state = git_state(checkout)
    assert len(state["git_commit"]) == 40 and state["git_dirty"] == "false"
    (checkout / "tests" / "test_new.py").write_text("x")  # tests and docs do not change what a run computes
    (checkout / "README.md").write_text("changed")
    (checkout / "foundry" / "__pycache__").mkdir()
    (checkout / "foundry" / "__pycache__" / "a.pyc").write_text("ignored")
    assert git_state(checkout)["git_dirty"] == "false"
    (checkout / "foundry" / "new_module.py").write_text("x")  # untracked code: dirty
    assert git_state(checkout)["git_dirty"] == "true"
    (checkout / "foundry" / "new_module.py").unlink()
    (checkout / "models" / "b.py").write_text("changed")  # a tracked change: dirty
    assert git_state(checkout)["git_dirty"] == "true"
    assert git_state(checkout.parent / "elsewhere") == {"git_commit": "unknown", "git_dirty": "unknown"}


def record(commit: str = "c1", dirty: str = "false") -> LineageRecord:
    fields = dict.fromkeys(("run_id", "run_status", "data_version", "data_remote", "data_source"), "")
    fields.update(data_source_digest="", parent_model="", holdout_bits_per_byte="", aliases=[], packages={}, config={})
    return LineageRecord(model="models:/m/1", git_commit=commit, git_dirty=dirty, **fields)


@pytest.mark.parametrize(
    "recorded, current, message",
    [
        (record("c0"), {"git_commit": "c1", "git_dirty": "false"}, "trained at commit c0, this code is at c1"),
        (record(dirty="true"), {"git_commit": "c1", "git_dirty": "false"}, "uncommitted changes"),
        (record(dirty=""), {"git_commit": "c1", "git_dirty": "false"}, "git_dirty=unknown"),
        (record(), {"git_commit": "c1", "git_dirty": "true"}, "this checkout has uncommitted changes"),
        (record("unknown", "unknown"), {"git_commit": "unknown", "git_dirty": "unknown"}, "git_dirty=unknown"),
    ],
)
def test_reproduction_refuses_other_or_uncommitted_code_unless_forced(recorded, current, message):
    with pytest.raises(CommitMismatch, match=message):
        check_commit(recorded, current, force=False)
    check_commit(recorded, current, force=True)


def test_reproduction_at_the_same_clean_commit_is_allowed():
    check_commit(record(), {"git_commit": "c1", "git_dirty": "false"}, force=False)
