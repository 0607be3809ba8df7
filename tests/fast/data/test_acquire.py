"""foundry.data.acquire: listing and fingerprinting local, glob, stdlib and http sources, read-only."""

from __future__ import annotations

import hashlib
import io
import socket
import zipfile
from pathlib import Path

import pytest
from helpers_sources import tar_gz

from foundry.config import DataConfig
from foundry.core.contracts import SourceManifest
from foundry.data.acquire import SourceError, acquire_source, list_source_files, source_manifest

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def cfg(source, **kw) -> DataConfig:
    return DataConfig(source=str(source), **kw)


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "corpus"
    # Created out of order on purpose: the listing must not depend on creation order.
    write(root / "z" / "y.txt", "zed")
    write(root / "tests" / "e.txt", "excluded dir")
    write(root / "__pycache__" / "f.py", "excluded dir")
    write(root / "skip.csv", "a,b")
    write(root / "sub" / "d.txt", "dee")
    write(root / "c.py", "print(1)")
    write(root / "b.md", "# bee")
    write(root / "a.txt", "ay")
    return root


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# --- local directories -----------------------------------------------------------------------


def test_walk_respects_extensions_and_exclude_dirs_in_sorted_order(tree):
    files, skipped = list_source_files(cfg(tree))
    assert [f.name for f in files] == ["a.txt", "b.md", "c.py", "sub/d.txt", "z/y.txt"]
    assert skipped == {}


def test_extensions_and_exclude_dirs_are_configurable(tree):
    files, _ = list_source_files(cfg(tree, extensions=[".txt"], exclude_dirs=["z"]))
    assert [f.name for f in files] == ["a.txt", "sub/d.txt", "tests/e.txt"]


def test_entries_carry_size_sha256_and_absolute_path(tree):
    files, _ = list_source_files(cfg(tree))
    for f in files:
        data = Path(f.path).read_bytes()
        assert Path(f.path).is_absolute()
        assert Path(f.path).resolve() == (tree / f.name).resolve()
        assert f.size == len(data)
        assert f.sha256 == hashlib.sha256(data).hexdigest()


def test_relative_source_gives_absolute_paths(tmp_path, monkeypatch):
    write(tmp_path / "rel" / "a.txt", "ay")
    monkeypatch.chdir(tmp_path)
    files, _ = list_source_files(cfg("rel"))
    assert [f.name for f in files] == ["a.txt"]
    assert all(Path(f.path).is_absolute() for f in files)


def test_symlink_outside_root_is_skipped_and_counted(tmp_path, tree):
    secret = write(tmp_path / "outside" / "secret.txt", "do not read")
    (tree / "leak.txt").symlink_to(secret)
    (tree / "alias.txt").symlink_to(tree / "a.txt")  # inside the root: fine
    files, skipped = list_source_files(cfg(tree))
    names = [f.name for f in files]
    assert "leak.txt" not in names
    assert "alias.txt" in names
    assert skipped == {"symlink_outside_root": 1}


def test_broken_symlink_is_skipped_or_fails(tree):
    (tree / "broken.txt").symlink_to(tree / "missing.txt")
    files, skipped = list_source_files(cfg(tree))
    assert "broken.txt" not in [f.name for f in files]
    assert skipped == {"unreadable": 1}
    with pytest.raises(SourceError, match="broken.txt"):
        list_source_files(cfg(tree, on_error="fail"))


def test_glob_source(tree):
    files, _ = list_source_files(cfg(f"{tree}/**/*.txt"))
    assert [f.name for f in files] == ["a.txt", "sub/d.txt", "tests/e.txt", "z/y.txt"]
    assert all(f.sha256 == hashlib.sha256(Path(f.path).read_bytes()).hexdigest() for f in files)


def test_glob_with_question_mark_in_directory_keeps_names_inside(tmp_path):
    write(tmp_path / "c" / "doc1" / "a.txt", "one")
    write(tmp_path / "c" / "doc2" / "b.txt", "two")
    files, _ = list_source_files(cfg(f"{tmp_path}/c/doc?/*.txt"))
    assert [f.name for f in files] == ["doc1/a.txt", "doc2/b.txt"]


def test_existing_directory_with_brackets_in_its_name(tmp_path):
    root = tmp_path / "run[1]"
    write(root / "a.txt", "ay")
    files, _ = list_source_files(cfg(root))
    assert [f.name for f in files] == ["a.txt"]


def test_single_file_source(tree):
    files, skipped = list_source_files(cfg(tree / "sub" / "d.txt"))
    assert [(f.name, f.size) for f in files] == [("d.txt", 3)]
    assert skipped == {}


def test_nonexistent_source(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        list_source_files(cfg(tmp_path / "nowhere"))


def test_source_without_matching_files(tmp_path):
    write(tmp_path / "only" / "data.csv", "a,b")
    with pytest.raises(SourceError, match="holds no files with extensions"):
        list_source_files(cfg(tmp_path / "only"))


def test_glob_matching_nothing(tmp_path):
    with pytest.raises(SourceError, match="holds no files"):
        list_source_files(cfg(f"{tmp_path}/*.txt"))


# --- stdlib ----------------------------------------------------------------------------------


def test_stdlib_email():
    files, _ = list_source_files(cfg("stdlib://email"))
    names = {f.name for f in files}
    assert {"__init__.py", "message.py"} <= names
    assert all(name.endswith((".txt", ".md", ".py", ".jsonl")) for name in names)
    assert not any("__pycache__" in name for name in names)


def test_stdlib_unknown_part():
    with pytest.raises(SourceError, match="no such part of the standard library"):
        list_source_files(cfg("stdlib://nope"))


# --- manifests -------------------------------------------------------------------------------


def test_digest_is_content_addressed(tmp_path):
    for where in ("one", "two"):
        write(tmp_path / where / "a.txt", "same")
        write(tmp_path / where / "sub" / "b.md", "content")
    m1 = acquire_source(cfg(tmp_path / "one"), tmp_path / "m1.json")
    m2 = acquire_source(cfg(tmp_path / "two"), tmp_path / "m2.json")
    assert m1.source != m2.source
    assert m1.digest == m2.digest
    assert (m1.files, m1.bytes) == (2, len("same") + len("content"))
    assert SourceManifest.read(tmp_path / "m1.json") == m1

    (tmp_path / "two" / "sub" / "b.md").write_text("changed")
    m3 = acquire_source(cfg(tmp_path / "two"), tmp_path / "m3.json")
    assert m3.digest != m1.digest


def test_digest_changes_with_a_rename(tmp_path):
    write(tmp_path / "src" / "a.txt", "x")
    files, skipped = list_source_files(cfg(tmp_path / "src"))
    before = source_manifest(cfg(tmp_path / "src"), files, skipped).digest
    (tmp_path / "src" / "a.txt").rename(tmp_path / "src" / "b.txt")
    files, skipped = list_source_files(cfg(tmp_path / "src"))
    assert source_manifest(cfg(tmp_path / "src"), files, skipped).digest != before


def test_source_is_never_modified(tmp_path, tree):
    (tree / "leak.txt").symlink_to(write(tmp_path / "outside" / "x.txt", "x"))
    before = snapshot(tree)
    acquire_source(cfg(tree), tmp_path / "manifest.json")
    acquire_source(cfg(f"{tree}/**/*.md"), tmp_path / "manifest2.json")
    assert snapshot(tree) == before
    assert sorted(p.name for p in tree.iterdir()) == sorted(
        ["a.txt", "b.md", "c.py", "skip.csv", "sub", "tests", "z", "__pycache__", "leak.txt"]
    )


# --- http ------------------------------------------------------------------------------------


def test_http_plain_text(http_folder, home):
    folder, base = http_folder
    write(folder / "doc.txt", "hello over http\n")
    before = snapshot(folder)
    files, _ = list_source_files(cfg(f"{base}/doc.txt"))
    assert [(f.name, f.size) for f in files] == [("doc.txt", 16)]
    assert Path(files[0].path).is_relative_to(home / "sources" / "http")
    assert files[0].sha256 == hashlib.sha256(b"hello over http\n").hexdigest()
    assert snapshot(folder) == before


def test_http_tar_gz_is_extracted_and_walked(http_folder, home):
    folder, base = http_folder
    (folder / "corpus.tar.gz").write_bytes(
        tar_gz(
            {
                "corpus/a.txt": "first",
                "corpus/deep/b.md": "second",
                "corpus/c.bin": "ignored",
            }
        )
    )
    files, _ = list_source_files(cfg(f"{base}/corpus.tar.gz"))
    assert [f.name for f in files] == ["corpus/a.txt", "corpus/deep/b.md"]
    assert [Path(f.path).read_text() for f in files] == ["first", "second"]
    assert all(Path(f.path).is_relative_to(home / "sources") for f in files)


def test_http_zip_slip_is_refused(http_folder):
    folder, base = http_folder
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("../evil.txt", "escape")
    (folder / "bad.zip").write_bytes(buffer.getvalue())
    with pytest.raises(SourceError, match="would extract outside"):
        list_source_files(cfg(f"{base}/bad.zip"))


def test_http_missing_file_is_a_source_error(http_folder):
    _, base = http_folder
    with pytest.raises(SourceError, match="cannot download"):
        list_source_files(cfg(f"{base}/absent.txt"))


def test_http_unreachable(home):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/doc.txt"
    with pytest.raises(SourceError, match="cannot download.*unreachable after 3 attempts") as info:
        list_source_files(cfg(url, fetch_retries=2, fetch_backoff_s=0.01))  # refused: retried, then given up
    assert url in str(info.value)
    # Nothing half-downloaded is left to be mistaken for the file next time.
    assert not [p for p in (home / "sources").rglob("doc.txt")]
