"""Glob sources do not follow symlinked folders out of the pattern's root or round a loop (#30 point 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundry.config import DataConfig
from foundry.data.acquire import list_source_files


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def names(pattern: str) -> tuple[list[str], dict[str, int]]:
    files, skipped = list_source_files(DataConfig(source=pattern))
    return [f.name for f in files], skipped


def test_a_link_to_the_folder_itself_is_read_once(tmp_path):
    root = tmp_path / "c"
    write(root / "a.txt", "ay")
    (root / "loop").symlink_to(".")
    assert names(f"{root}/**/*.txt") == (["a.txt"], {"symlink_loop": 1})


def test_two_links_that_point_at_each_other_end(tmp_path):
    root = tmp_path / "c"
    write(root / "x" / "a.txt", "ay")
    write(root / "y" / "b.txt", "bee")
    (root / "x" / "to_y").symlink_to(root / "y")
    (root / "y" / "to_x").symlink_to(root / "x")
    found, skipped = names(f"{root}/**/*.txt")
    assert found == ["x/a.txt", "x/to_y/b.txt", "y/b.txt", "y/to_x/a.txt"]
    assert skipped == {"symlink_loop": 2}


def test_a_link_to_a_folder_outside_is_not_entered(tmp_path):
    root = tmp_path / "c"
    write(root / "a.txt", "ay")
    write(tmp_path / "outside" / "secret.txt", "do not read")
    (root / "etc").symlink_to(tmp_path / "outside")
    found, skipped = names(f"{root}/**/*.txt")
    assert (found, skipped) == (["a.txt"], {"symlink_outside_root": 1})


def test_a_file_link_outside_is_skipped_and_one_inside_kept(tmp_path):
    root = tmp_path / "c"
    write(root / "a.txt", "ay")
    (root / "leak.txt").symlink_to(write(tmp_path / "outside" / "secret.txt", "no"))
    (root / "alias.txt").symlink_to(root / "a.txt")
    assert names(f"{root}/*.txt") == (["a.txt", "alias.txt"], {"symlink_outside_root": 1})


def test_a_link_to_a_sibling_folder_inside_is_followed(tmp_path):
    root = tmp_path / "c"
    write(root / "v3" / "a.txt", "ay")
    (root / "current").symlink_to(root / "v3")
    assert names(f"{root}/*/a.txt") == (["current/a.txt", "v3/a.txt"], {})


def test_wildcards_skip_dot_names_as_glob_does(tmp_path):
    root = tmp_path / "c"
    write(root / ".git" / "a.txt", "hidden")
    write(root / ".b.txt", "hidden")
    write(root / "d" / "c.txt", "seen")
    assert names(f"{root}/**/*.txt")[0] == ["d/c.txt"]
    assert names(f"{root}/.*/*.txt")[0] == [".git/a.txt"]
