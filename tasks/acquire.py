"""Stage A, acquire: find the source's files and fingerprint them. The source is only ever read.

Remote sources (http, s3) are copied into `$FOUNDRY_HOME/sources/` first, so every later step
sees a local directory.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
import sysconfig
import tarfile
import urllib.parse
import urllib.request
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from foundry.config import DataConfig
from foundry.env import foundry_home

log = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")


class SourceError(RuntimeError):
    """The source cannot be read; the message says which and why."""


@dataclass(frozen=True)
class SourceFile:
    path: str  # absolute, for reading
    name: str  # relative to the source root, for reports and manifests
    size: int
    sha256: str


def _is_glob(source: str) -> bool:
    return any(ch in source for ch in "*?[")


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _walk(root: Path, cfg: DataConfig, skipped: dict[str, int]) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in cfg.exclude_dirs)
        for filename in sorted(filenames):
            path = Path(dirpath, filename)
            if not any(filename.endswith(ext) for ext in cfg.extensions):
                continue
            if path.is_symlink() and not _inside(path, root):
                skipped["symlink_outside_root"] = skipped.get("symlink_outside_root", 0) + 1
                log.warning("skipping %s: symlink points outside the source root", path)
                continue
            found.append(path)
    return found


def _fetch_http(url: str, dest: Path) -> Path:
    name = Path(urllib.parse.urlparse(url).path).name or "index.txt"
    target = dest / name
    if not target.exists():
        dest.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(url, timeout=30) as response, open(target.with_suffix(".part"), "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            raise SourceError(f"cannot download {url}: {exc}") from None
        target.with_suffix(".part").rename(target)
    return target


def _extract(archive: Path, dest: Path) -> Path:
    out = dest / "extracted"
    if out.exists():
        return out
    tmp = dest / "extracting"
    shutil.rmtree(tmp, ignore_errors=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                if not _inside(tmp / member, tmp):
                    raise SourceError(f"{archive.name}: member {member!r} would extract outside its folder")
            zf.extractall(tmp)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(tmp, filter="data")  # refuses absolute paths, links out and devices
    tmp.rename(out)
    return out


def _fetch_s3(url: str, dest: Path) -> Path:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    parsed = urllib.parse.urlparse(url)
    bucket, prefix = parsed.netloc, parsed.path.lstrip("/")
    s3 = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                target = dest / obj["Key"]
                if not _inside(target, dest):
                    continue
                if not target.exists() or target.stat().st_size != obj["Size"]:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    s3.download_file(bucket, obj["Key"], str(target))
    except (BotoCoreError, ClientError) as exc:
        raise SourceError(f"cannot read {url}: {exc}") from None
    return dest / prefix if (dest / prefix).is_dir() else dest


def local_root(source: str, cache: Path) -> Path | str:
    """A local directory (or glob pattern) holding the source's files."""
    if source.startswith("stdlib://"):  # stdlib://email is the standard library's email package
        root = Path(sysconfig.get_paths()["stdlib"]) / source.removeprefix("stdlib://")
        if not root.exists():
            raise SourceError(f"data.source {source!r}: no such part of the standard library ({root})")
        return root
    scheme = urllib.parse.urlparse(source).scheme
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    if scheme in ("http", "https"):
        downloaded = _fetch_http(source, cache / "http" / key)
        if downloaded.name.endswith(ARCHIVE_SUFFIXES):
            return _extract(downloaded, cache / "http" / key)
        return downloaded.parent
    if scheme == "s3":
        return _fetch_s3(source, cache / "s3" / key)
    path = Path(source).expanduser()
    if path.exists():  # before the glob test: "run[1]" may be a real folder
        return path.resolve()
    if _is_glob(source):
        return os.path.abspath(os.path.expanduser(source))
    raise SourceError(f"data.source {source!r} does not exist")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _glob_base(pattern: str) -> Path:
    """The folder above the first path component that holds a wildcard."""
    parts = Path(pattern).parts
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    return Path(*parts[:fixed])


def list_source_files(cfg: DataConfig) -> tuple[list[SourceFile], dict[str, int]]:
    """Every readable file of the source, in a stable order, and counts of what was skipped."""
    root = local_root(cfg.source, foundry_home() / "sources")
    skipped: dict[str, int] = {}
    if isinstance(root, str):
        paths = sorted(Path(p) for p in glob.glob(root, recursive=True) if Path(p).is_file())
        base = _glob_base(root)
    elif root.is_file():
        paths, base = [root], root.parent
    else:
        paths, base = _walk(root, cfg, skipped), root
    files = []
    for path in paths:
        try:
            files.append(SourceFile(str(path), os.path.relpath(path, base), path.stat().st_size, _sha256(path)))
        except OSError as exc:
            if cfg.on_error == "fail":
                raise SourceError(f"cannot read {path}: {exc}") from None
            skipped["unreadable"] = skipped.get("unreadable", 0) + 1
            log.warning("skipping %s: %s", path, exc)
    if not files:
        raise SourceError(f"data.source {cfg.source!r} holds no files with extensions {cfg.extensions}")
    return files, skipped


def source_manifest(cfg: DataConfig, files: list[SourceFile], skipped: dict[str, int]) -> dict:
    """What was read, content-addressed: the same files give the same digest wherever they live."""
    entries = [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in files]
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()
    return {
        "source": cfg.source, "digest": digest, "files": len(files),
        "bytes": sum(f.size for f in files), "skipped": skipped,
        "entries": [asdict(f) for f in files],
    }


def acquire(cfg: DataConfig, manifest_path: Path) -> dict:
    """List and fingerprint the source, write its manifest (the DVC dependency of `prepare`)."""
    files, skipped = list_source_files(cfg)
    manifest = source_manifest(cfg, files, skipped)
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest, indent=1))
    log.info("acquired %d files (%.1f MB) from %s", manifest["files"], manifest["bytes"] / 1e6, cfg.source)
    return manifest
