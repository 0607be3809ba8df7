"""Stage A, acquire: find the source's files and fingerprint them. The source is only ever read.

Remote sources (http, s3) are mirrored into `$FOUNDRY_HOME/sources/` first and asked again on every
acquire (`foundry.data.remote`), so every later step sees a local directory as fresh as the origin; an
archive among them is unpacked by `foundry.data.archives`, which trusts neither it nor the interpreter.
A remote source's mirror stays locked from its fetch until its last file is hashed, so a second acquire of
the same source (another pipeline) can neither re-fetch nor re-extract it in between: the manifest hashes
the files as the origin served them at one moment. A file over `data.max_file_bytes` is refused before it is read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import sysconfig
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from foundry.config import DataConfig
from foundry.core.contracts import SourceFile, SourceManifest
from foundry.core.digests import sha256_file
from foundry.core.fs import remove_tree
from foundry.core.redact import redact_url
from foundry.data.archives import ArchiveError, remove_partial, unpack
from foundry.data.formats import base_name
from foundry.data.globbing import glob_base, glob_files
from foundry.data.limits import TooLarge
from foundry.data.remote import SourceError, digest_of, fetch_http, inside, locked, sync_s3
from foundry.runtime.env import foundry_home

log = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")


def _is_glob(source: str) -> bool:
    return any(ch in source for ch in "*?[")


def wanted(filename: str, cfg: DataConfig) -> bool:
    """A listed extension, possibly gzip-compressed: `a.jsonl` and `a.jsonl.gz` for `.jsonl`."""
    return any(base_name(filename).endswith(ext) for ext in cfg.extensions)


def _walk(root: Path, cfg: DataConfig, skipped: dict[str, int]) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in cfg.exclude_dirs)
        for filename in sorted(filenames):
            path = Path(dirpath, filename)
            if not wanted(filename, cfg):
                continue
            if path.is_symlink() and not inside(path, root):
                _skip(skipped, "symlink_outside_root", f"skipping {path}: symlink points outside the source root")
                continue
            found.append(path)
    return found


def _skip(skipped: dict[str, int], reason: str, message: str) -> None:
    skipped[reason] = skipped.get(reason, 0) + 1
    log.warning("%s", message)


def _extract(archive: Path, dest: Path, fresh: bool, cfg: DataConfig, skipped: dict[str, int]) -> Path:
    """The archive's members under `dest/extracted`; extracted again when the archive changed, so that
    members removed from it leave the copy too. The members left out (links, special files) are listed
    beside it and counted on every acquire; a copy without that list predates the checks and is redone."""
    out, note = dest / "extracted", dest / "extracted.left-out.json"
    if fresh or not note.exists():
        remove_tree(out, within=dest, ignore_errors=True)
        note.unlink(missing_ok=True)
    if not out.exists():
        tmp = dest / "extracting"
        remove_partial(tmp)
        tmp.mkdir(parents=True)
        try:
            left_out = unpack(archive, tmp, cfg)
        except BaseException:
            remove_partial(tmp)  # nothing half-extracted is ever mistaken for the archive
            raise
        note.write_text(json.dumps(left_out))
        tmp.rename(out)
    for member, reason in json.loads(note.read_text()):
        message = f"{archive.name}: member {member!r} left out ({reason.replace('_', ' ')})"
        if cfg.on_error == "fail":
            raise ArchiveError(f"{message}; links and special files are never extracted")
        _skip(skipped, reason, message)
    return out


Origins = dict[str, dict[str, str]]  # local path (or "*": every file) -> what the remote origin said


def mirror_of(source: str, cache: Path) -> Path | None:
    """Where a remote source is mirrored under `cache`; None for a local one."""
    scheme = urllib.parse.urlparse(source).scheme
    if scheme in ("http", "https", "s3"):
        return cache / ("s3" if scheme == "s3" else "http") / digest_of(source)
    return None


@contextmanager
def holding_mirror(source: str, cache: Path) -> Iterator[None]:
    """The remote source's mirror locked for the block (`locked`, reentrant in this thread: the fetch inside
    takes it again); a local source needs no lock. One source at a time, so two never wait on each other."""
    folder = mirror_of(source, cache)
    with locked(folder) if folder is not None else nullcontext():
        yield


def local_root(source: str, cache: Path, cfg: DataConfig, skipped: dict[str, int]) -> tuple[Path | str, Origins]:
    """A local directory, file or glob pattern holding the source's files; remote files are fetched (again
    when they changed) first, and what their origin said comes along. Call it inside `holding_mirror`, and
    read the files there: once the lock goes, another acquire may replace them."""
    if source.startswith("stdlib://"):  # stdlib://email is the standard library's email package
        root = Path(sysconfig.get_paths()["stdlib"]) / source.removeprefix("stdlib://")
        if not root.exists():
            raise SourceError(f"data.source {source!r}: no such part of the standard library ({root})")
        return root, {}
    scheme, folder = urllib.parse.urlparse(source).scheme, mirror_of(source, cache)
    if scheme in ("http", "https"):
        downloaded, changed, seen = fetch_http(source, folder, cfg)
        if downloaded.name.endswith(ARCHIVE_SUFFIXES):
            return _extract(downloaded, folder, changed, cfg, skipped), {"*": seen}
        return downloaded, {"*": seen}
    if scheme == "s3":
        seen = sync_s3(source, folder, cfg, lambda name: wanted(name, cfg))
        prefix = urllib.parse.urlparse(source).path.lstrip("/")
        return (folder / prefix if (folder / prefix).is_dir() else folder), seen
    path = Path(source).expanduser()
    if path.exists():  # before the glob test: "run[1]" may be a real folder
        return path.resolve(), {}
    if _is_glob(source):
        return os.path.abspath(os.path.expanduser(source)), {}
    raise SourceError(f"data.source {source!r} does not exist")


def _files_of(
    source: str, cache: Path, cfg: DataConfig, skipped: dict[str, int]
) -> tuple[list[tuple[Path, str]], Origins]:
    """(path, name relative to the source root) for each wanted file of one source, and their origins."""
    root, origins = local_root(source, cache, cfg, skipped)
    if isinstance(root, str):
        paths, refused = glob_files(root)  # the user's choice: no extension filter
        for path, reason in refused:
            _skip(skipped, reason, f"skipping {path}: {reason.replace('_', ' ')} (links are not followed there)")
        base = glob_base(root)
    elif root.is_file():
        paths, base = [root], root.parent
    else:
        paths, base = _walk(root, cfg, skipped), root
    return [(path, os.path.relpath(path, base)) for path in paths], origins


def _fingerprint(
    path: Path, name: str, cfg: DataConfig, skipped: dict[str, int], origin: dict[str, str]
) -> SourceFile | None:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or never end
            raise SourceError(f"{path} is not a regular file")
        if info.st_size > cfg.max_file_bytes:  # refused before hashing: a sparse file costs nothing to make
            raise TooLarge(f"{info.st_size} bytes, more than data.max_file_bytes ({cfg.max_file_bytes})")
        seen = {key: origin.get(key, "") for key in ("origin", "etag", "last_modified", "checked_at")}
        return SourceFile(path=str(path), name=name, size=info.st_size, sha256=sha256_file(path), **seen)
    except (OSError, SourceError, TooLarge) as exc:
        if cfg.on_error == "fail":
            raise SourceError(f"cannot read {path}: {exc}") from None
        kinds = {TooLarge: "too_large", SourceError: "not_regular_file"}
        reason = kinds.get(type(exc), "unreadable")
        _skip(skipped, reason, f"skipping {path}: {exc}")
        return None


def _source_entries(source: str, prefix: str, cfg: DataConfig, skipped: dict[str, int]) -> list[SourceFile]:
    """One source's files, fetched, listed and fingerprinted under one hold of its mirror's lock."""
    cache = foundry_home() / "sources"
    with holding_mirror(source, cache):
        found, origins = _files_of(source, cache, cfg, skipped)
        entries = [
            _fingerprint(path, prefix + name, cfg, skipped, origins.get(str(path), origins.get("*", {})))
            for path, name in found
        ]
    return [entry for entry in entries if entry is not None]


def list_source_files(cfg: DataConfig) -> tuple[list[SourceFile], dict[str, int]]:
    """Every readable file of every source, in a stable order, and counts of what was skipped.

    A source that cannot be reached stops the run when `on_error` is `fail`; otherwise it is skipped
    and counted (a refused archive as `bad_archive`), unless no source is left at all."""
    sources, skipped, problems, files = cfg.source_list, {}, [], []
    for i, source in enumerate(sources):
        prefix = f"{i}/" if len(sources) > 1 else ""  # names stay unique across sources
        try:
            files += _source_entries(source, prefix, cfg, skipped)
        except SourceError as exc:  # a file that cannot be read raises only under on_error: fail
            if cfg.on_error == "fail" or len(sources) == 1:
                raise
            problems.append(str(exc))
            reason = "bad_archive" if isinstance(exc, ArchiveError) else "unreachable_source"
            _skip(skipped, reason, f"skipping source: {exc}")
    if problems and not files:
        raise SourceError(f"no source could be read: {'; '.join(problems)}")
    if not files:
        raise SourceError(
            f"data.source {', '.join(sources)!r} holds no files with extensions {cfg.extensions} "
            "(or those, gzip-compressed)"
        )
    return files, skipped


def source_manifest(cfg: DataConfig, files: list[SourceFile], skipped: dict[str, int]) -> SourceManifest:
    """What was read, content-addressed: the same files give the same digest wherever they live."""
    content = [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in files]
    return listed_sources(cfg, files, content_digest(content), skipped)


def content_digest(content: list[dict]) -> str:
    """The digest of what identifies the files read (names, sizes, hashes; an image's label): not where they live."""
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def listed_sources(cfg: DataConfig, files: list[SourceFile], digest: str, skipped: dict[str, int]) -> SourceManifest:
    """The manifest of `files` read from `cfg`'s sources (named redacted), fingerprinted as `digest`; `skipped`:
    how many were left out, by reason. Text and images alike."""
    sources = [redact_url(source) for source in cfg.source_list]  # the config's own are redacted already
    return SourceManifest(
        source=", ".join(sources),
        sources=sources,
        digest=digest,
        files=len(files),
        bytes=sum(f.size for f in files),
        skipped=skipped,
        entries=files,
    )


def acquire_source(cfg: DataConfig, manifest_path: Path) -> SourceManifest:
    """List and fingerprint the source, write its manifest (the DVC dependency of `prepare`)."""
    files, skipped = list_source_files(cfg)
    manifest = source_manifest(cfg, files, skipped)
    manifest.write(manifest_path)
    log.info("acquired %d files (%.1f MB) from %s", manifest.files, manifest.bytes / 1e6, manifest.source)
    return manifest
