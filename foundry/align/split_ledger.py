"""Sticky splits for chat and preference records: `foundry.data.ledger`'s ledger, keyed by what the user asked.

A record's identity is the hash of its user turns, in order, whitespace-collapsed: not its replies nor its
system turn. Every record asking the same thing lands in the same split, so a changed or added reply to a
held-out prompt stays held out, and a preference pair is held out exactly when an SFT record with its prompt
is: one ledger serves `sft` and `dpo`, so a model tuned with one and then the other never trains on a prompt
either held out. Identities the ledger lists keep their split; new ones get the content-hash rule
(`holdout_set`).

The ledger lives in `$FOUNDRY_HOME/ledgers/align/`: one folder per generation, named by the digest of its
`ledger.csv`, and `HEAD` naming the current one (replaced atomically, so a reader never sees half a ledger).
The align flow holds `locked` while it prepares, validates and versions, and only then calls `extend` with
the records of the data version it made: a run that fails anywhere before leaves the ledger as it was. Each
row's name is `<data version>:<file>:<line>` where the prompt was first assigned.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from foundry.align.records import Conversation, Preference, from_kept
from foundry.core.fs import remove_tree
from foundry.data.ledger import LEDGER, Ledger

NUM_PERM = 0  # records are matched exactly, by identity: the ledger's MinHash signatures have no columns
SPLITS = ("train", "holdout")


def identity(record: Conversation | Preference) -> str:
    asked = [" ".join(turn.split()) for turn in record.asked]
    return hashlib.sha256(json.dumps(asked, ensure_ascii=False).encode("utf-8")).hexdigest()


def store(home: Path) -> Path:
    return home / "ledgers" / "align"


def head(home: Path) -> Path | None:
    """The current generation's folder, None before any alignment data was versioned here."""
    pointer = store(home) / "HEAD"
    return store(home) / pointer.read_text().strip() if pointer.is_file() else None


def digest(home: Path) -> str:
    """What names the current ledger in the align data task's cache key ('' for none)."""
    current = head(home)
    return current.name if current else ""


def read(folder: Path | None) -> Ledger:
    return Ledger.read(folder, NUM_PERM) if folder is not None else Ledger()


@contextmanager
def locked(home: Path) -> Iterator[Path | None]:
    """The current generation, held against every other preparation on this `$FOUNDRY_HOME` until the block
    ends (the kernel lets go if the process dies)."""
    store(home).mkdir(parents=True, exist_ok=True)
    with open(store(home) / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield head(home)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def kept_records(data_dir: Path) -> Iterator[tuple[str, str, str]]:
    """(identity, split, source) of each record an alignment data version keeps, in its files' order; a data
    version prepared before ledgers existed reads the same way."""
    with open(data_dir / "records.csv", encoding="utf-8", newline="") as fh:
        source = {row["sha256"]: row["source"] for row in csv.DictReader(fh)}
    for split in SPLITS:
        with open(data_dir / f"{split}.jsonl", encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    sha = hashlib.sha256(line.rstrip("\n").encode("utf-8")).hexdigest()
                    yield identity(from_kept(json.loads(line))), split, source.get(sha, "")


def extend(home: Path, kept: Iterable[tuple[str, str, str]], version: str) -> Path:
    """Add the (identity, split, source) rows of data version `version` (`kept_records`) that the current
    ledger does not list, as a new generation; call it under `locked`. Returns the generation's folder (the
    current one when nothing was new)."""
    ledger, current = read(head(home)), head(home)
    listed, rows = set(ledger.shas), []
    for sha, split, where in kept:
        if sha not in listed:
            listed.add(sha)
            rows.append((sha, split, f"{version}:{where}", []))
    if not rows and current is not None:
        return current
    work = store(home) / ".new"
    remove_tree(work, within=store(home), ignore_errors=True)
    work.mkdir()
    ledger.extended(rows, NUM_PERM).write(work)
    name = hashlib.sha256((work / LEDGER).read_bytes()).hexdigest()
    folder = store(home) / name
    if folder.exists():  # the same ledger reached again: keep the generation there is
        remove_tree(work, within=store(home))
    else:
        work.rename(folder)
    (store(home) / "HEAD.new").write_text(name + "\n")
    os.replace(store(home) / "HEAD.new", store(home) / "HEAD")
    return folder
