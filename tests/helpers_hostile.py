"""Hostile input (#30 points 1, 2 and 5: tests/fast/data/test_hostile_input.py,
tests/fast/registry/test_hostile_registry.py, tests/fast/test_security_review.py): archives an attacker builds, a
served archive and what it may change, and the folder an attack would delete."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zipfile
from pathlib import Path

from foundry.config import DataConfig
from foundry.data.acquire import list_source_files
from foundry.data.remote import digest_of

FAST = {"fetch_backoff_s": 0.01, "fetch_retries": 0}  # no retries either: a refusal is final


def tar_bytes(add, compression: str = "gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}", format=tarfile.GNU_FORMAT) as tf:
        add(tf)
    return buffer.getvalue()


def add_file(tf: tarfile.TarFile, name: str, data: bytes = b"text") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def add_link(tf: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    tf.addfile(info)


def add_dir(tf: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o777
    tf.addfile(info)


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def files_under(root: Path) -> dict[str, bytes]:
    """Every regular file under `root`, links not followed."""
    found = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath, name)
            if not path.is_symlink() and path.is_file():
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


class Served:
    """An archive published on the test http server, where acquire mirrors it, and what the machine held
    before: the only files acquire may add are its own bookkeeping and the extracted copy."""

    def __init__(self, http_folder, tmp_path: Path, name: str, data: bytes) -> None:
        self.www, base = http_folder
        (self.www / name).write_bytes(data)
        self.url, self.tmp_path = f"{base}/{name}", tmp_path
        self.cache = tmp_path / "home" / "sources" / "http" / digest_of(self.url)
        self.before = files_under(tmp_path)

    def acquire(self, **settings):
        return list_source_files(DataConfig(source=self.url, **{**FAST, **settings}))

    def assert_clean(self, extracted: bool) -> None:
        """The target untouched, the source unchanged, nothing half-extracted, no file added elsewhere."""
        assert (self.tmp_path / "outside" / "flag").read_text() == "original"
        assert not (self.cache / "extracting").exists()
        assert (self.cache / "extracted").exists() == extracted
        own = {self.cache / Path(self.url).name, self.cache / "extracted.left-out.json"}
        own |= {self.cache.with_name(self.cache.name + suffix) for suffix in (".lock", ".origin.json")}
        after = files_under(self.tmp_path)
        changed = {
            self.tmp_path / name
            for name, data in after.items()
            if self.before.get(name) != data and not (self.tmp_path / name).is_relative_to(self.cache / "extracted")
        }
        assert changed <= own, changed - own
        assert all(after[name] == data for name, data in self.before.items())


def realpath_limit_attack(dest: Path) -> bytes:
    """CVE-2025-4517, as CPython's test_realpath_limit_attack builds it: a symlink chain whose expansion
    passes PATH_MAX, so that realpath stops checking, then a hard link and a file through it."""
    steps = "abcdefghijklmnop"
    component = "d" * ((os.pathconf(dest.parent, "PC_PATH_MAX") - len(str(dest)) - 1) // (len(steps) + 1))

    def add(tf):
        path = ""
        for step in steps:
            add_dir(tf, os.path.join(path, component))
            add_link(tf, os.path.join(path, step), component)
            path = os.path.join(path, component)
        linkpath = os.path.join(*steps, "l" * 254)
        add_link(tf, linkpath, os.path.join(*[".."] * len(steps)))
        add_link(tf, "escape", os.path.join(linkpath, ".."))
        add_link(tf, "flaglink", os.path.join("escape", "flag"), tarfile.LNKTYPE)
        add_file(tf, "flaglink", b"overwrite")
        add_file(tf, "escape/newfile", b"new")
        add_file(tf, "doc.txt", b"a document")

    return tar_bytes(add)


def sparse_tar(name: str, size: int) -> bytes:
    """An old-GNU sparse member: a header whose map says `size` bytes of holes, no data at all."""
    info = tarfile.TarInfo(name)
    info.type, info.size = tarfile.GNUTYPE_SPARSE, 0
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    header[483:495] = b"%011o\0" % size  # realsize
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header[:512])
    return gzip.compress(bytes(header) + bytes(1024))


def outside_folder(tmp_path: Path) -> Path:
    """The attacker's target: a folder beside FOUNDRY_HOME holding a file they want overwritten."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "flag").write_text("original")
    return folder


def victim(folder: Path) -> Path:
    """A folder with a file in it: what an attack would delete."""
    folder.mkdir(parents=True)
    (folder / "precious.txt").write_text("keep me")
    return folder


def survived(folder: Path) -> bool:
    return (folder / "precious.txt").read_text() == "keep me"
