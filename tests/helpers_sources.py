"""Data sources: files written where a source reads them, tar archives, and short fetch backoffs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

SHORT_BACKOFF = {"fetch_backoff_s": 0.01}  # the waits are the same code; the test need not sit through them


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def tar_gz(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
