"""Reproduction needs the code that trained the model: the dirty flag (a real git repo) and the refusal; and it
trains in the precision the model trained in."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from foundry.config import FoundryConfig
from foundry.core.contracts import LineageRecord
from foundry.registry.lineage import CommitMismatch, as_trained, check_commit, identical
from foundry.runtime.tracking import git_state


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


@pytest.mark.parametrize(
    "recorded, tag, reproduced",
    [
        ("bf16-if-native", "bf16-mixed", "bf16-mixed"),  # trained on a CPU with bf16: bf16 on any machine
        ("bf16-if-native", "32-true", "32-true"),
        ("auto", "bf16-mixed", "bf16-mixed"),  # trained on a GPU
        ("bf16-if-native", None, "bf16-if-native"),  # no tag: resolved here, as before the tag
        ("32-true", "bf16-mixed", "32-true"),  # a fixed precision is what it says
    ],
)
def test_a_reproduction_trains_in_the_precision_the_machine_that_trained_resolved(recorded, tag, reproduced):
    config = FoundryConfig().model_dump(mode="json")
    config["train"]["precision"] = recorded
    tags = {"resumed_from_step": "0"} | ({"train.resolved_precision": tag} if tag else {})
    assert as_trained(config, tags)["train"]["precision"] == reproduced
    assert config["train"]["precision"] == recorded  # the record is left as it was


@pytest.mark.parametrize("tag, reproduced", [("false", False), ("true", True), (None, True)])
def test_a_reproduction_of_a_run_trained_without_a_compiler_trains_uncompiled(tag, reproduced):
    config = FoundryConfig().model_dump(mode="json")
    assert config["train"]["compile"] is True
    tags = {"resumed_from_step": "0"} | ({"train.compiled": tag} if tag else {})
    assert as_trained(config, tags)["train"]["compile"] is reproduced
    assert config["train"]["compile"] is True  # the record is left as it was


def test_a_reproduction_with_nothing_recorded_to_compare_is_not_called_identical():
    assert not identical({})
    assert identical({"val/loss": (2.5, 2.5)})
    assert not identical({"val/loss": (2.5, 2.51)})
