"""Unpacking an archive source (.zip, .tar, .tar.gz, .tgz) without trusting the archive or the interpreter.

Neither `extractall` nor tarfile's extraction filters are used: the `data` filter of the Python 3.11.7
here can be walked out of the destination (CVE-2025-4517, fixed in 3.11.13/3.12.11) and
`requires-python` still admits such interpreters. Foundry checks every member itself before writing it:

- only regular files and folders are written; links (symbolic or hard) and special files (FIFOs,
  devices) are never created: under `data.on_error: skip` they are left out and counted, under `fail`
  the archive is refused;
- a member named with an absolute path or a `..` component, or whose resolved destination leaves the
  folder, refuses the archive;
- files are created exclusively (never through an existing file or link) with plain permissions;
- members are counted against `data.max_archive_members`, and the bytes actually written against
  `data.max_inflated_bytes` and `data.max_inflation_ratio` (`foundry.data.limits`) as they stream.

A refused archive raises `ArchiveError` naming the archive, the member and the limit; the caller removes
whatever was written.
"""

from __future__ import annotations

import logging
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO

from foundry.config import DataConfig
from foundry.core.fs import remove_tree
from foundry.data.limits import inflation_limit
from foundry.data.remote import SourceError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
# What a damaged archive raises while being read: tarfile, zipfile, gzip/zlib, the OS; RuntimeError is
# zipfile's word for an encrypted member or an unsupported compression.
MALFORMED = (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, RuntimeError)


class ArchiveError(SourceError):
    """An archive that cannot be unpacked safely; the message names the archive, the member and why."""


class _Unpacker:
    """One archive's extraction into `dest`: the checks every member passes and the running budgets."""

    def __init__(self, archive: Path, dest: Path, cfg: DataConfig) -> None:
        self.archive, self.dest, self.cfg = archive, dest, cfg
        self.root = dest.resolve()
        self.limit, self.limit_key = inflation_limit(cfg, archive.stat().st_size)
        self.members = 0
        self.written = 0
        self.left_out: list[tuple[str, str]] = []  # (member, reason)

    def refuse(self, member: str, why: str) -> ArchiveError:
        return ArchiveError(f"{self.archive.name}: member {member!r} {why}")

    def count(self, member: str) -> None:
        self.members += 1
        if self.members > self.cfg.max_archive_members:
            raise self.refuse(member, f"is past {self.cfg.max_archive_members} members (data.max_archive_members)")

    def leave_out(self, member: str, reason: str, what: str) -> None:
        """A link or special file: never created; fatal under `on_error: fail`."""
        if self.cfg.on_error == "fail":
            raise self.refuse(member, f"is {what}, which is never extracted (set data.on_error=skip to leave it out)")
        log.warning("%s: leaving out member %r: %s", self.archive.name, member, what)
        self.left_out.append((member, reason))

    def target(self, member: str) -> Path:
        """Where `member` goes, or `ArchiveError` when its name could lead anywhere else."""
        pure = PurePosixPath(member)
        if pure.is_absolute() or ".." in pure.parts or "\x00" in member or not pure.parts:
            raise self.refuse(member, "would extract outside its folder")
        path = self.dest.joinpath(*pure.parts)
        if not path.resolve().is_relative_to(self.root):
            raise self.refuse(member, "would extract outside its folder")
        return path

    def folder(self, member: str) -> None:
        if PurePosixPath(member).parts:  # `./`, which `tar -C dir -c .` writes first, is the folder itself
            self.target(member).mkdir(parents=True, exist_ok=True)

    def file(self, member: str, declared: int, stream: IO[bytes]) -> None:
        """Copy `stream` to a new file, stopping the moment the bytes pass the inflation limit."""
        path = self.target(member)
        if self.written + declared > self.limit:  # a header's word is enough to refuse, never to accept
            raise self._too_large(member)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.parent.resolve().is_relative_to(self.root):  # a folder can only come from us, but be sure
            raise self.refuse(member, "would extract outside its folder")
        try:
            out = open(path, "xb")  # O_EXCL: never through an existing file or link
        except FileExistsError:
            raise self.refuse(member, "appears twice (or over a folder)") from None
        with out:
            while chunk := stream.read(CHUNK):
                self.written += len(chunk)
                if self.written > self.limit:
                    raise self._too_large(member)
                out.write(chunk)

    def _too_large(self, member: str) -> ArchiveError:
        return self.refuse(member, f"takes the archive past {self.limit} inflated bytes ({self.limit_key})")


def unpack(archive: Path, dest: Path, cfg: DataConfig) -> list[tuple[str, str]]:
    """Extract `archive` into the existing empty folder `dest`; returns the (member, reason) left out.
    Raises `ArchiveError` for an archive refused; `dest` may then hold part of it."""
    unpacker = _Unpacker(archive, dest, cfg)
    try:
        if archive.name.endswith(".zip"):
            _unpack_zip(unpacker)
        else:
            _unpack_tar(unpacker)
    except ArchiveError:
        raise
    except MALFORMED as exc:
        raise ArchiveError(f"{archive.name}: cannot be unpacked: {type(exc).__name__}: {exc}") from None
    return unpacker.left_out


def _unpack_tar(unpacker: _Unpacker) -> None:
    with tarfile.open(unpacker.archive) as tf:  # compression detected from the bytes, not the name
        for member in tf:  # one header at a time: a million-member archive is refused before it is listed
            unpacker.count(member.name)
            if member.isdir():
                unpacker.folder(member.name)
            elif member.isreg():  # regular, contiguous and sparse members; holes come out as zeros
                unpacker.file(member.name, member.size, tf.extractfile(member))
            elif member.issym() or member.islnk():
                unpacker.leave_out(member.name, "archive_link", f"a link to {member.linkname!r}")
            else:
                unpacker.leave_out(member.name, "archive_special_file", "a special file (FIFO or device)")


def _unpack_zip(unpacker: _Unpacker) -> None:
    with zipfile.ZipFile(unpacker.archive) as zf:
        infos = zf.infolist()
        if len(infos) > unpacker.cfg.max_archive_members:  # the central directory says so before any byte
            unpacker.members = len(infos) - 1
            unpacker.count(infos[-1].filename)
        for info in infos:
            unpacker.count(info.filename)
            kind = stat.S_IFMT(info.external_attr >> 16)  # 0 when no Unix mode was recorded: a plain file
            if info.is_dir() or kind == stat.S_IFDIR:
                unpacker.folder(info.filename)
            elif kind in (0, stat.S_IFREG):
                with zf.open(info) as stream:
                    unpacker.file(info.filename, info.file_size, stream)
            elif kind == stat.S_IFLNK:
                unpacker.leave_out(info.filename, "archive_link", "a symbolic link")
            else:
                unpacker.leave_out(info.filename, "archive_special_file", "a special file (FIFO or device)")


def remove_partial(folder: Path) -> None:
    """Remove a half-made extraction; it holds no links, and rmtree would not follow one anyway."""
    remove_tree(folder, within=folder.parent, ignore_errors=True)
