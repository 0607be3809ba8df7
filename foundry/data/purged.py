"""Purge marks: the data versions `foundry purge --apply` removed, and the documents no dataset may hold again.

`$FOUNDRY_HOME/purged/<version>.json` (a `PurgeMark`) says that a purge record removed a data version and, once
the purge has committed one, which version replaced it. From then on `hydrate_version` refuses the version,
`foundry reproduce` refuses a model trained on it, and the next run's parent ledger is the replacement.
`$FOUNDRY_HOME/purged/documents/<record>.json` lists the sha256 of the documents the record removed (never
their text): `prepare` drops them should a source still hold them.

Fail closed: a mark or document list that cannot be read is an error, never "not purged". Every file is
written whole or not at all (a temp file, then `os.replace`), so a purge that stops half-way leaves each one
as it was or as it should be.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import uuid
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from foundry.core.contracts import DataVersion, check_data_version

log = logging.getLogger(__name__)

FOLDER = "purged"
DOCUMENTS = "documents"
# `purge-<UTC yyyymmddTHHMMSS>-<8 hex>`: it names a file (`documents/<record>.json`), so it is checked first.
RECORD = re.compile(r"purge-\d{8}T\d{6}-[0-9a-f]{8}")
SHA256 = re.compile(r"[0-9a-f]{64}")


class UnreadableMark(RuntimeError):
    """A purge mark or document list is there but cannot be read: nothing may go on as if it were not."""


class DataPurged(RuntimeError):
    """A data version that a purge removed was asked for, and nothing replaced it."""


def check_record(value: str) -> str:
    if not isinstance(value, str) or not RECORD.fullmatch(value):
        raise ValueError(f"{value!r} is not a purge record id (purge-<yyyymmddTHHMMSS>-<8 hex digits>)")
    return value


class PurgeMark(BaseModel):
    """A data version a purge record removed; `replaced_by`: the version rewritten without the purged
    documents (None until the purge commits it, or for good when the version could only be deleted)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_version: str
    record: str
    replaced_by: str | None = None
    when: str  # UTC, ISO 8601

    @field_validator("data_version")
    @classmethod
    def _is_a_version(cls, value: str) -> str:
        return check_data_version(value)

    @field_validator("replaced_by")
    @classmethod
    def _is_a_version_or_none(cls, value: str | None) -> str | None:
        return None if value is None else check_data_version(value)

    @field_validator("record")
    @classmethod
    def _is_a_record(cls, value: str) -> str:
        return check_record(value)

    def refusal(self) -> str:
        """What refusing this version says: the record that removed it and what replaced it."""
        then = f"its replacement is {self.replaced_by}" if self.replaced_by else "nothing replaced it"
        return f"data version {self.data_version} was purged by purge record {self.record}; {then}"


def mark_path(home: Path, version: str) -> Path:
    return home / FOLDER / f"{check_data_version(version)}.json"


def documents_path(home: Path, record: str) -> Path:
    return home / FOLDER / DOCUMENTS / f"{check_record(record)}.json"


def _write(path: Path, text: str) -> None:
    """`text` into `path`, whole or not at all, and on disk before the caller goes on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def mark(home: Path, purge: PurgeMark) -> Path:
    """Mark `purge.data_version` purged (again, with its replacement, once the purge has one)."""
    path = mark_path(home, purge.data_version)
    _write(path, purge.model_dump_json(indent=2) + "\n")
    return path


def mark_of(home: Path, version: str) -> PurgeMark | None:
    """The mark of a data version; None when no purge removed it. `UnreadableMark` when its file is there but
    is not a mark of this version."""
    path = mark_path(home, version)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableMark(f"purge mark {path} cannot be read ({exc}): refusing to treat {version} as kept") from None
    try:
        found = PurgeMark.model_validate_json(raw)
    except ValidationError:
        found = None
    if found is None or found.data_version != version:
        raise UnreadableMark(
            f"purge mark {path} is not a mark of data version {version}: refusing to treat it as kept; "
            "run the purge again (it rewrites the mark) or restore the file"
        )
    return found


def marked(home: Path) -> set[str]:
    """Every data version a purge on this home removed (has a mark), read and checked (`mark_of`)."""
    folder = home / FOLDER
    if not folder.is_dir():
        return set()
    names = [p.stem for p in folder.glob("*.json") if re.fullmatch(r"[0-9a-f]{32}", p.stem)]
    return {v for v in names if mark_of(home, v) is not None}


def followed(data: DataVersion, home: Path) -> DataVersion:
    """`data`, or the version a purge replaced it with (and that one's, should it be purged too); `DataPurged`
    naming the record when a purge removed it and nothing replaced it."""
    seen = {data.data_version}
    while (purge := mark_of(home, data.data_version)) is not None:
        if purge.replaced_by is None or purge.replaced_by in seen:
            raise DataPurged(purge.refusal())
        log.info("%s: using %s in its place", purge.refusal(), purge.replaced_by)
        data = DataVersion(data_version=purge.replaced_by, remote=data.remote)  # committed to the same remotes
        seen.add(data.data_version)
    return data


def record_documents(home: Path, record: str, shas: set[str]) -> Path:
    """The sha256 of the documents purge `record` removed, for `prepare` to drop from then on."""
    bad = sorted(s for s in shas if not (isinstance(s, str) and SHA256.fullmatch(s)))
    if bad:
        raise ValueError(f"not document sha256s (64 lower-case hex digits): {bad[:3]}")
    path = documents_path(home, record)
    _write(path, json.dumps(sorted(shas), indent=0) + "\n")
    return path


def _documents(path: Path) -> set[str]:
    try:
        shas = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise UnreadableMark(f"purged document list {path} cannot be read ({exc}): refusing to prepare") from None
    if not isinstance(shas, list) or not all(isinstance(s, str) and SHA256.fullmatch(s) for s in shas):
        raise UnreadableMark(f"purged document list {path} is not a list of sha256s: refusing to prepare")
    return set(shas)


def _lists(home: Path) -> list[Path]:
    folder = home / FOLDER / DOCUMENTS
    if not folder.is_dir():
        return []
    lists = sorted(folder.glob("*.json"))  # temp files end in .tmp
    if stray := [p.name for p in lists if not RECORD.fullmatch(p.stem)]:
        raise UnreadableMark(f"{folder} holds files that are not purge records' document lists: {stray}")
    return lists


def purged_documents(home: Path) -> set[str]:
    """The sha256 of every document any purge on this home removed (empty when none did)."""
    return set().union(*(_documents(path) for path in _lists(home)))


def records_of(home: Path, shas: set[str]) -> set[str]:
    """The purge records that removed any of these documents."""
    return {path.stem for path in _lists(home) if _documents(path) & shas}


def digest(shas: set[str]) -> str:
    """One sha256 for a set of document sha256s: part of the dataset cache key when any is purged."""
    return hashlib.sha256("\n".join(sorted(shas)).encode()).hexdigest()
