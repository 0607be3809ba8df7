"""Inside one data version: which documents a purge matches, and every file and position that holds them.

A prepared dataset writes its documents in step: its GPT workload's table (`documents.csv`, `records.csv` for
alignment records: `GptWorkload.documents_table`) has one row per document in write order, and `<split>.jsonl` the
same documents of that split in the same order; so the n-th line of `train.jsonl` is the n-th `train` row. Token
shards hold each split's documents in that order too, one end-of-text token after each: the n-th document is the
n-th run of tokens between end-of-text tokens. That is how a span is found; it is then decoded with the version's
own `tokenizer.json` and compared with the document's text ("verified"). Where a document's own text encodes an
end-of-text token (the literal `<|endoftext|>`), the runs do not line up, and every document of the split is encoded
again in order to count its tokens instead. Alignment records keep their tokens in ragged arrays
(`<split>.<field>.npy` with `.offsets.npy`): record n is values `offsets[n]` to `offsets[n+1]`. The ledger
(`ledger.csv`, `ledger_minhash.npy`) lists documents by sha256 and name, row for row; the audit names documents in
its examples.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from foundry.core import workload
from foundry.data.ledger import LEDGER, SIGNATURES
from foundry.data.manifest import FILE as MANIFEST
from foundry.data.manifest import SPLITS, TOKENIZER, DatasetManifest
from foundry.purge.plan import Criterion, Location, names_in, names_source


@dataclass(frozen=True)
class VersionFiles:
    """A data version's files: DVC's listing ({path: md5}) and where each can be read on this machine."""

    listing: dict[str, str]
    path: Callable[[str], Path]

    def manifest(self) -> DatasetManifest:
        return DatasetManifest.model_validate_json(self.path(MANIFEST).read_bytes())

    def location(self, name: str, holds: str, entries: list[str]) -> Location:
        return Location(file=name, md5=self.listing[name], holds=holds, entries=tuple(entries))


@dataclass(frozen=True)
class Document:
    """One document (or alignment record) of a version, in memory while the version is scanned."""

    sha256: str
    split: str
    line: int  # in `<split>.jsonl`, from 1
    row: int  # in the documents table, from 1
    source: str
    text: str


@dataclass
class Matched:
    """What a version's documents gave: the matching ones, kept in memory for finding their copies elsewhere
    (their text never leaves this process), and the names the ledger knows them by."""

    documents: list[Document] = field(default_factory=list)

    @property
    def texts(self) -> dict[str, str]:
        return {d.sha256: d.text for d in self.documents}


def gpt(manifest: DatasetManifest):
    """The GPT workload whose data version this is (`foundry.pretrain.workload.GptWorkload`): the table that lists
    its documents, what a criterion matches in a line, where their tokens lie."""
    return workload.for_manifest(manifest)


def documents(files: VersionFiles, manifest: DatasetManifest) -> Iterator[Document]:
    """Every document of the version, split by split, each with its table row; a table and split files that do
    not agree are a ValueError (a purge does not guess which line is which document)."""
    own = gpt(manifest)
    with open(files.path(own.documents_table), encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for split in SPLITS:
        numbered = [(n, r) for n, r in enumerate(rows, 2) if r["split"] == split]  # row 1 is the header
        count = 0
        with open(files.path(f"{split}.jsonl"), encoding="utf-8") as fh:
            for count, line in enumerate(fh, 1):
                if count > len(numbered):
                    break
                row_no, row = numbered[count - 1]
                text = own.document_text(json.loads(line))
                yield Document(row["sha256"], split, count, row_no, row["source"], text)
        if count != len(numbered):
            raise ValueError(
                f"{split}.jsonl holds {count} lines but {own.documents_table} {len(numbered)} {split} rows"
            )


def matching(files: VersionFiles, criterion: Criterion) -> Matched:
    manifest = files.manifest()
    found = Matched()
    found.documents = [d for d in documents(files, manifest) if criterion.selects(d.text, d.sha256, d.source)]
    return found


def locations(
    files: VersionFiles, criterion: Criterion, matched: Matched, shas: set[str], names: set[str]
) -> list[Location]:
    """Every file of the version holding one of `matched` (its own matching documents) or naming one of `shas`
    (matched in any version) or `names` (the names the ledgers give them)."""
    manifest = files.manifest()
    hits = matched.documents
    found = []
    if hits:
        found.append(files.location(gpt(manifest).documents_table, "row", [f"row {d.row}" for d in hits]))
        for split in SPLITS:
            mine = [d for d in hits if d.split == split]
            if mine:
                found.append(files.location(f"{split}.jsonl", "text", [f"line {d.line}" for d in mine]))
                found += _tokens(files, manifest, split, mine)
    found += ledger_locations(files, criterion, shas)
    found += _audit(files, criterion, names)
    return found


def ledger_names(files: VersionFiles, criterion: Criterion, shas: set[str]) -> set[str]:
    """The names (`file` or `file:line`) the version's ledger gives the matched documents."""
    return {name for _, sha, name in _ledger_rows(files) if sha in shas or _listed(criterion, sha, name)}


def _ledger_rows(files: VersionFiles) -> list[tuple[int, str, str]]:
    if LEDGER not in files.listing:
        return []
    with open(files.path(LEDGER), encoding="utf-8", newline="") as fh:
        return [(n, r["sha256"], r["name"]) for n, r in enumerate(csv.DictReader(fh), 2)]


def _listed(criterion: Criterion, sha: str, name: str) -> bool:
    """A ledger row the criterion names by itself (a regex needs the text, which a ledger does not hold)."""
    return (criterion.kind == "document" and sha == criterion.value) or (
        criterion.kind == "source" and names_source(name, criterion.value)
    )


def listed_shas(files: VersionFiles, criterion: Criterion, shas: set[str] = frozenset()) -> set[str]:
    """The matched documents the version's ledger lists: those the criterion names by itself, and `shas`."""
    return {sha for _, sha, name in _ledger_rows(files) if sha in shas or _listed(criterion, sha, name)}


def ledger_locations(files: VersionFiles, criterion: Criterion, shas: set[str]) -> list[Location]:
    """Ledger rows (and their signatures) listing a matched document or image, text and image versions alike."""
    rows = [n for n, sha, name in _ledger_rows(files) if sha in shas or _listed(criterion, sha, name)]
    if not rows:
        return []
    found = [files.location(LEDGER, "row", [f"row {n}" for n in rows])]
    if SIGNATURES in files.listing:  # one MinHash signature per ledger row, in the same order
        found.append(files.location(SIGNATURES, "signature", [f"row {n - 2}" for n in rows]))
    return found


def _names(text: str, criterion: Criterion, names: set[str]) -> bool:
    if criterion.kind == "match" and criterion.pattern.search(text):
        return True
    if criterion.kind == "source" and names_in(text, criterion.value):
        return True
    return any(names_in(text, name) for name in names)


def _audit(files: VersionFiles, criterion: Criterion, names: set[str]) -> list[Location]:
    """Audit examples that name a matched document (or whose masked excerpt the regex matches)."""
    found = []
    if "audit.json" in files.listing:
        audit = json.loads(files.path("audit.json").read_text(encoding="utf-8"))
        entries = [
            f"{rule} example {k}"
            for rule, record in sorted(audit.get("rules", audit).items())
            if isinstance(record, dict)
            for k, example in enumerate(record.get("examples", []), 1)
            if _names(json.dumps(example, ensure_ascii=False), criterion, names)
        ]
        if entries:
            found.append(files.location("audit.json", "name", entries))
    if "audit.md" in files.listing:
        lines = files.path("audit.md").read_text(encoding="utf-8").splitlines()
        entries = [f"line {n}" for n, line in enumerate(lines, 1) if _names(line, criterion, names)]
        if entries:
            found.append(files.location("audit.md", "name", entries))
    return found


def _tokens(files: VersionFiles, manifest: DatasetManifest, split: str, hits: list[Document]) -> list[Location]:
    if not gpt(manifest).tokens_in_shards:
        return _record_tokens(files, split, hits)
    shards = manifest.shards_of(split)
    parts = [np.memmap(files.path(s.file), dtype=np.dtype(s.dtype).newbyteorder("<"), mode="r") for s in shards]
    if not parts:
        return []
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(files.path(TOKENIZER)))
    spans = _spans(files, manifest, split, parts, tokenizer)
    starts = np.cumsum([0] + [len(p) for p in parts])
    entries: dict[str, list[str]] = {s.file: [] for s in shards}
    for doc in hits:
        begin, end = spans[doc.line - 1]
        ids = np.concatenate([p[max(begin - a, 0) : max(end - a, 0)] for p, a in zip(parts, starts)])
        decoded = tokenizer.decode(ids.tolist(), skip_special_tokens=False)  # an end-of-text in it: not the span
        verified = "verified" if decoded == doc.text else "does NOT decode to the document"
        for shard, part, a in zip(shards, parts, starts):
            lo, hi = max(begin, a), min(end, a + len(part))
            if lo < hi:
                entries[shard.file].append(f"line {doc.line}: tokens {lo - a}-{hi - a} ({verified})")
    return [files.location(name, "tokens", found) for name, found in entries.items() if found]


def _spans(files, manifest: DatasetManifest, split: str, parts: list, tokenizer) -> list[tuple[int, int]]:
    """(start, end) in the split's tokens of each of its documents, in order, end-of-text excluded."""
    ends, offset = [], 0
    for part in parts:
        ends += (np.flatnonzero(np.asarray(part) == manifest.eot_id) + offset).tolist()
        offset += len(part)
    texts = [d.text for d in documents(files, manifest) if d.split == split]
    if len(ends) == len(texts):
        return [(0 if i == 0 else ends[i - 1] + 1, end) for i, end in enumerate(ends)]
    spans, start = [], 0  # a document held `<|endoftext|>` itself: count each one's tokens instead
    for encoding in tokenizer.encode_batch_fast(texts):
        spans.append((start, start + len(encoding.ids)))
        start += len(encoding.ids) + 1
    return spans


def _record_tokens(files: VersionFiles, split: str, hits: list[Document]) -> list[Location]:
    """An alignment record's values in each ragged array of its split (not decoded: found by offsets)."""
    found = []
    for name in sorted(files.listing):
        if name.startswith(f"{split}.") and name.endswith(".npy") and not name.endswith(".offsets.npy"):
            offsets = np.load(files.path(name.removesuffix(".npy") + ".offsets.npy"))
            entries = [f"line {d.line}: values {offsets[d.line - 1]}-{offsets[d.line]}" for d in hits]
            found.append(files.location(name, "tokens", entries))
    return found
