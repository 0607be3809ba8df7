"""Stage A, clean: decode, normalise, scrub, filter, de-duplicate and split documents, streaming.

Two steps. `clean_partition` (a map over partitions, in parallel) reads one partition's files a
document at a time, normalises, scrubs personal data, applies the quality rules and fingerprints
what is left, writing candidates to disk. `select_documents` (global, in corpus order) drops exact
and near duplicates, picks the holdout split, and writes `train.jsonl`, `holdout.jsonl` and
`documents.csv`. Every decision depends on the document and on the documents before it in corpus
order, never on the partitioning, so the output is the same for any number of workers.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import tempfile
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from foundry.config import DataConfig
from foundry.core.contracts import SourceFile
from foundry.core.fs import remove_tree
from foundry.data.audit import STAGE_OF, Audit
from foundry.data.formats import BadInputError, read_documents
from foundry.data.ledger import Ledger, Lineage, holdout_set
from foundry.data.privacy import pii
from foundry.data.progress import PrepareProgress
from foundry.data.quality import quality_problem
from foundry.pretrain.dedup import Deduplicator, Signer

__all__ = [
    "BadInputError",
    "CleanStats",
    "PartitionJob",
    "clean_documents",
    "clean_partition",
    "holdout_set",
    "iter_texts",
    "normalise",
    "quality_problem",
    "select_documents",
]
log = logging.getLogger(__name__)
SPLITS = ("train", "holdout")
SIGNATURE_BLOCK = 4096  # signatures read at a time while de-duplicating (2 MB at 128 permutations)


@dataclass
class CleanStats:
    docs_in: int = 0
    docs_out: int = 0
    dropped: Counter = field(default_factory=Counter)
    split_docs: Counter = field(default_factory=Counter)
    split_bytes: Counter = field(default_factory=Counter)
    pii: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (documents, spans)

    def as_metrics(self) -> dict[str, int]:
        metrics = {"docs_in": self.docs_in, "docs_out": self.docs_out}
        metrics.update({f"dropped_{reason}": n for reason, n in sorted(self.dropped.items())})
        for kind, (docs, spans) in sorted(self.pii.items()):
            metrics.update({f"pii_{kind}_docs": docs, f"pii_{kind}_spans": spans})
        metrics.update({f"{split}_docs": self.split_docs[split] for split in SPLITS})
        metrics.update({f"{split}_bytes": self.split_bytes[split] for split in SPLITS})
        return metrics


def normalise(text: str) -> str:
    """NFC, unix newlines, no trailing whitespace on lines, one trailing newline."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in text.split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


@dataclass(frozen=True)
class PartitionJob:
    """One partition's input files (in corpus order) and where its candidates go."""

    index: int
    entries: list[SourceFile]
    cfg: DataConfig
    work_dir: str
    progress: bool = False
    counter: PrepareProgress | None = None  # in this process only: counts the files cleaned for the orchestrator
    purged: frozenset[str] = frozenset()  # sha256 of documents a purge removed (`foundry.data.purged`)

    def path(self, suffix: str) -> Path:
        return Path(self.work_dir) / f"part_{self.index:05d}{suffix}"


def _rejecter(cfg: DataConfig, audit: Audit):
    def reject(where: str, reason: str, detail: str = "") -> None:
        if cfg.on_error == "fail":
            message = f"{where}: {reason.replace('_', ' ')} {detail}".strip()
            raise BadInputError(message + " (set data.on_error=skip to skip such input)")
        audit.removed(reason, where, detail)

    return reject


def clean_partition(job: PartitionJob) -> dict:
    """Map step: candidates (`.jsonl`, already in the output format), their metadata and signatures."""
    from tqdm.auto import tqdm

    cfg, audit, signer = job.cfg, Audit(), Signer(job.cfg)
    reject, docs_in, signatures = _rejecter(cfg, audit), 0, []
    with open(job.path(".jsonl"), "w", encoding="utf-8") as texts, open(job.path(".meta.jsonl"), "w") as meta:
        for entry in tqdm(job.entries, desc="clean", unit="file", disable=not job.progress, mininterval=2):
            before = docs_in
            for raw, where in read_documents(entry.path, entry.name, cfg, reject):
                docs_in += 1
                text, found = pii.scrub(normalise(raw), cfg.pii)
                encoded = text.encode("utf-8")
                sha = hashlib.sha256(encoded).hexdigest()
                if sha in job.purged:  # before its PII is counted: the audit quotes a PII example's text
                    audit.counted("purged")
                    continue
                for kind, spans in found.items():
                    audit.replaced(kind, where, spans, pii.example(text, kind))
                problem = quality_problem(text, cfg)
                if problem:
                    audit.removed(problem, where)
                    continue
                texts.write(json.dumps({"text": text, "source": entry.name}, ensure_ascii=False) + "\n")
                meta.write(
                    json.dumps(
                        [sha, len(text), len(encoded), entry.name, where],
                        ensure_ascii=False,
                    )
                    + "\n"
                )
                signatures.append(signer(text))
            if job.counter is not None:
                job.counter.cleaned(1, docs_in - before)
    shape = (len(signatures), cfg.near_dup_num_perm)
    np.save(job.path(".sig.npy"), np.stack(signatures) if signatures else np.zeros(shape, np.uint32))
    return {"index": job.index, "docs_in": docs_in, "candidates": len(signatures), "audit": audit.to_dict()}


def _meta(job: PartitionJob) -> Iterator[tuple[list, np.ndarray]]:
    signatures = np.load(job.path(".sig.npy"), mmap_mode="r")
    with open(job.path(".meta.jsonl"), encoding="utf-8") as fh:
        for start in range(0, len(signatures), SIGNATURE_BLOCK):
            # Rows of a memmap are memmaps, each ~2 us to make: a block is copied out, its rows are plain views.
            block = np.array(signatures[start : start + SIGNATURE_BLOCK])
            for signature, line in zip(block, fh):  # block first: zip stops before reading a line past it
                yield json.loads(line), signature


@dataclass
class Selection:
    stats: CleanStats
    audit: Audit
    chunks: list[dict]  # {"split", "start", "end"}: byte ranges of the split files, for encoding
    ledger: Ledger  # the parent's, then the documents this version added
    lineage: dict[str, int]  # counts against the parent's ledger (not part of the dataset: see prepare)


def _decide(
    jobs: list[PartitionJob], cfg: DataConfig, audit: Audit, lineage: Lineage | None
) -> tuple[list[list[bool]], list[tuple[str, int]], list[tuple[str, str, np.ndarray]]]:
    """Pass one, over metadata only: which candidates are kept, (hash, bytes) of those, and (hash, name,
    signature) of the kept ones the parent's ledger does not list. The ledger's documents are de-duplicated
    against first: a new document that repeats one of them is the duplicate."""
    dedup, keep, kept, new = Deduplicator(cfg), [], [], []
    listed = set(lineage.ledger.shas) if lineage else set()
    if lineage:
        for sha, name, signature in zip(lineage.ledger.shas, lineage.ledger.names, lineage.ledger.signatures):
            dedup.seed(sha, signature, name)
    for job in jobs:
        flags = []
        for (sha, _, size, _, where), signature in _meta(job):
            rule, other = dedup.check(sha, signature, where)
            if rule:
                audit.removed(rule, where, f"repeats {other}")
            else:
                kept.append((sha, size))
                if sha not in listed:
                    new.append((sha, where, np.array(signature)))
            flags.append(rule is None)
        keep.append(flags)
    return keep, kept, new


def _split_of(sha: str, holdout: set[str], sticky: dict[str, str], lineage: Lineage | None) -> str | None:
    """Where a kept document goes; None for an old training document a retrain does not replay."""
    if sha in holdout:
        return "holdout"
    if sha in sticky and lineage is not None and not lineage.replayed(sha):
        return None
    return "train"


class _SplitWriter:
    """Appends kept documents to the split files and `documents.csv`, cutting encode chunks as it goes."""

    def __init__(self, out_dir: Path, target: dict[str, int]):
        self.outputs = {split: open(out_dir / f"{split}.jsonl", "wb") for split in SPLITS}
        self.table = open(out_dir / "documents.csv", "w", encoding="utf-8", newline="")
        self.rows = csv.writer(self.table)
        self.rows.writerow(["sha256", "split", "chars", "bytes", "source"])
        self.target, self.chunks, self.open_chunk = target, [], {}

    def add(self, line: bytes, split: str, sha: str, chars: int, size: int, source: str) -> None:
        chunk = self.open_chunk.get(split)
        if chunk is None or chunk["bytes"] >= self.target[split]:
            chunk = self.open_chunk[split] = {"split": split, "start": self.outputs[split].tell(), "bytes": 0}
            self.chunks.append(chunk)
        self.outputs[split].write(line)
        chunk["end"], chunk["bytes"] = self.outputs[split].tell(), chunk["bytes"] + size
        self.rows.writerow([sha, split, chars, size, source])

    def close(self) -> list[dict]:
        for fh in (*self.outputs.values(), self.table):
            fh.close()
        return [{k: c[k] for k in ("split", "start", "end")} for c in self.chunks]


def select_documents(
    jobs: list[PartitionJob],
    results: list[dict],
    cfg: DataConfig,
    out_dir: Path,
    chunks_per_split: int = 1,
    lineage: Lineage | None = None,
) -> Selection:
    """Global step: de-duplicate in corpus order, split (documents the parent's ledger lists keep their
    split), and write the split files and `documents.csv`."""
    audit = Audit()
    for result in results:
        audit.merge(Audit.from_dict(result["audit"]))
    keep, kept, new = _decide(jobs, cfg, audit, lineage)
    sticky = lineage.ledger.split_of if lineage else {}
    holdout = holdout_set(kept, cfg.holdout_fraction, sticky)
    split_of = {sha: _split_of(sha, holdout, sticky, lineage) for sha, _ in kept}
    stats = CleanStats(docs_in=sum(r["docs_in"] for r in results), docs_out=sum(1 for s in split_of.values() if s))
    sizes = {split: sum(size for sha, size in kept if split_of[sha] == split) for split in SPLITS}
    writer = _SplitWriter(out_dir, {split: max(1, -(-sizes[split] // chunks_per_split)) for split in SPLITS})
    try:
        for job, flags in zip(jobs, keep):
            with open(job.path(".jsonl"), "rb") as texts, open(job.path(".meta.jsonl"), encoding="utf-8") as meta:
                for flag, line, record in zip(flags, texts, meta):
                    if not flag:
                        continue
                    sha, chars, size, source, _ = json.loads(record)
                    if split := split_of[sha]:
                        writer.add(line, split, sha, chars, size, source)
                        stats.split_docs[split] += 1
                        stats.split_bytes[split] += size
    finally:
        chunks = writer.close()
    for name, rule in audit.to_dict().items():
        if STAGE_OF.get(name, "input") == "pii":
            stats.pii[name] = (rule["documents"], rule["spans"])
        else:
            stats.dropped[name] = rule["documents"]
    rows = [(sha, "holdout" if sha in holdout else "train", where, signature) for sha, where, signature in new]
    ledger = (lineage.ledger if lineage else Ledger()).extended(rows, cfg.near_dup_num_perm)
    counts = {
        "new_docs": len(new),
        "ledger_docs_present": len(kept) - len(new),
        "replayed_docs": sum(1 for sha, _ in kept if sha in sticky and split_of[sha] == "train"),
        "not_replayed_docs": sum(1 for s in split_of.values() if s is None),
    }
    return Selection(stats, audit, chunks, ledger, counts)


def clean_documents(entries: list[SourceFile], cfg: DataConfig, out_dir: Path, progress: bool = True) -> CleanStats:
    """Both steps in this process, one partition: `train.jsonl`, `holdout.jsonl`, `documents.csv`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".clean-", dir=out_dir.parent))
    try:
        job = PartitionJob(0, entries, cfg, str(work), progress)
        return select_documents([job], [clean_partition(job)], cfg, out_dir).stats
    finally:
        remove_tree(work, within=out_dir.parent, ignore_errors=True)


def iter_texts(jsonl_path: Path) -> Iterator[str]:
    return read_chunk(jsonl_path, 0, jsonl_path.stat().st_size)


def line_ranges(jsonl_path: Path, count: int) -> list[tuple[int, int]]:
    """At most `count` byte ranges [start, end) of about equal size that cover the file, each of whole lines."""
    size = jsonl_path.stat().st_size
    cuts = [0]
    with open(jsonl_path, "rb") as fh:
        for k in range(1, count):
            fh.seek(max(cuts[-1], size * k // count))
            fh.readline()  # to the start of the next line
            if cuts[-1] < fh.tell() < size:
                cuts.append(fh.tell())
    return [(start, end) for start, end in zip(cuts, [*cuts[1:], size]) if end > start]


def read_chunk(jsonl_path: Path, start: int, end: int) -> Iterator[str]:
    """The texts of the lines in bytes [start, end) of a split file."""
    with open(jsonl_path, "rb") as fh:
        fh.seek(start)
        while fh.tell() < end and (line := fh.readline()):
            yield json.loads(line)["text"]
