"""Step 4 of `foundry purge --apply`: a data version written again, into a new folder, without the purged documents.

Every file keeps its name. A purged document leaves its row of the table (`documents.csv`, `records.csv`), its line
of `<split>.jsonl`, its tokens and the end-of-text after them in its split's shards (each shard shrinks in place:
the same file names, their token counts and sha256 in the manifest updated), its values in each ragged array of an
alignment dataset, its ledger row with the MinHash signature of that row, and every audit example or `audit.md`
line that names it. Every other document's bytes stay as they were, in their split and order, so a model trained
on the old version saw exactly the new one's documents plus the purged ones. The manifest's counts, token totals,
ledger size and file digests follow; `stats["purged"]` counts the documents removed by purges.

Spans are found as `purge_data` finds them (the n-th document is the n-th run of tokens between end-of-text
tokens; a split holding a document whose own text encodes end-of-text is encoded again to count each document's
tokens), and every cut is checked to end on an end-of-text. The input is only read: its files may be DVC cache
objects hard-linked into hydrated copies. A version that cannot be read consistently, or whose rewrite would leave
a split without documents, gives None and leaves `out` empty.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from foundry.core import workload
from foundry.core.digests import fast_digest
from foundry.core.fs import remove_file
from foundry.data.ledger import LEDGER, SIGNATURES
from foundry.data.manifest import FILE as MANIFEST
from foundry.data.manifest import SPLITS, TOKENIZER, DatasetManifest, Shard
from foundry.purge import data as purge_data
from foundry.purge.cuts import Inconsistent, batched, complement, cut, ragged_without, spans
from foundry.purge.data import VersionFiles
from foundry.purge.plan import DataHit, names_in

log = logging.getLogger(__name__)
ENCODE_BATCH = 512


@dataclass(frozen=True)
class Rewritten:
    folder: Path
    removed: dict[str, int]  # what was removed, by kind: documents, tokens, ledger rows, audit examples, ...


@dataclass(frozen=True)
class _Entry:
    """One document of the version (its text is not kept): where it is, and whether it goes."""

    split: str
    line: int  # in `<split>.jsonl`, from 1
    source: str
    gone: bool


def rewrite(files: VersionFiles, hit: DataHit, shas: set[str], names: set[str], out: Path) -> Rewritten | None:
    """The version of `files` without the documents of `shas` (and those `hit` names), written into `out` (a new,
    empty folder); `names`: the names ledgers give them, whose audit examples and lines go too. None (and `out`
    left empty) when a split would be left without documents or the version's files do not agree."""
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise ValueError(f"{out} is not empty: a purge rewrites a data version into a new folder")
    gone = set(shas) | set(hit.documents) | set(hit.listed)
    try:  # as the workload of its data rewrites it: documents here (`rewrite_documents`)
        removed = workload.for_manifest(files.manifest()).purge_rewrite(files, hit, gone, names, out)
    except (ValueError, KeyError) as exc:  # `Inconsistent` too: files that do not agree with one another
        _clear(out)
        log.warning("purge cannot rewrite data version %s: %s", hit.data_version, exc)
        return None
    except BaseException:
        _clear(out)  # a failure of this machine (a full disk): the purge stops, and is simply run again
        raise
    return None if removed is None else Rewritten(out, removed)


def rewrite_documents(files: VersionFiles, hit: DataHit, gone: set[str], names: set[str], out: Path) -> dict | None:
    """`rewrite` for documents or alignment records: what was removed, by kind; None where a split would be empty."""
    manifest = files.manifest()
    entries = _entries(files, manifest, gone)
    if missing := set(hit.documents) - set(_table_shas(files, manifest)):
        raise Inconsistent(f"{len(missing)} document(s) the plan found are not in the version's table")
    if empty := [s for s in SPLITS if not any(e.split == s and not e.gone for e in entries)]:
        log.warning("purge: %s would hold no %s documents; it is deleted, not rewritten", hit.data_version, empty)
        return None
    return _Writer(files, manifest, hit, entries, names, out).write(gone)


def _clear(out: Path) -> None:
    for path in sorted(out.rglob("*"), reverse=True):
        if path.is_file() or path.is_symlink():
            remove_file(path, within=out)
        else:
            path.rmdir()


def _table_shas(files: VersionFiles, manifest: DatasetManifest) -> Iterator[str]:
    with open(files.path(purge_data.gpt(manifest).documents_table), encoding="utf-8", newline="") as fh:
        yield from (row["sha256"] for row in csv.DictReader(fh))


def _entries(files: VersionFiles, manifest: DatasetManifest, gone: set[str]) -> list[_Entry]:
    """Every document, split by split (`purge_data.documents` checks that the table and split files agree)."""
    return [_Entry(d.split, d.line, d.source, d.sha256 in gone) for d in purge_data.documents(files, manifest)]


class _Writer:
    """Writes the new version file by file, counting what it removed; `changed` are the files it rewrote."""

    def __init__(self, files, manifest, hit, entries, names, out):
        self.files, self.manifest, self.hit, self.entries, self.out = files, manifest, hit, entries, out
        self.gpt = purge_data.gpt(manifest)  # its workload: the documents' table, text and tokens
        # Audit examples name documents by their source (`file` or `file:line`), as ledgers do.
        self.names = {n for n in set(names) | {e.source for e in entries if e.gone} if n}
        self.removed: dict[str, int] = {}
        self.changed: set[str] = set()
        self.rows: list[dict] = []  # the table's removed rows
        self.sizes = dict.fromkeys(SPLITS, 0)  # UTF-8 bytes of the removed documents' texts, as prepare counts

    def count(self, what: str, n: int) -> None:
        self.removed[what] = self.removed.get(what, 0) + int(n)

    def write(self, gone: set[str]) -> dict[str, int]:
        table = self.gpt.documents_table
        self.rows = [row for _, row in self._csv(table, lambda row: row["sha256"] not in gone)]
        if len(self.rows) != sum(1 for e in self.entries if e.gone):
            raise Inconsistent(f"{table} lists a document twice")
        self.count("documents", len(self.rows))
        shards = list(self.manifest.shards or [])
        for split in SPLITS:
            lines = {e.line for e in self.entries if e.gone and e.split == split}
            self.count(f"{split} documents", len(lines))
            self._lines(split, lines)
            if lines and self.gpt.tokens_in_shards:
                shards = self._shards(split, shards)
            elif lines:
                self._ragged(split, lines)
        ledger = self._ledger(gone)
        self._audit()
        for name in self.files.listing:  # everything else, byte for byte
            if name != MANIFEST and not (self.out / name).exists():
                (self.out / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.files.path(name), self.out / name)
        self._manifest(shards, ledger)
        return self.removed

    # --- tables and lines ----------------------------------------------------------------------------

    def _csv(self, name: str, keep: Callable[[dict], bool]) -> list[tuple[int, dict]]:
        """The table without the rows `keep` refuses; returns those (index from 0, row). The kept rows are
        written back as `csv.writer` wrote them, which is checked first: a table it did not write would not
        keep its bytes."""
        raw = self.files.path(name).read_bytes()
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))
        if _csv_bytes(rows) != raw:
            raise Inconsistent(f"{name} is not written as prepare writes it: its rows would not keep their bytes")
        header, body = rows[0], rows[1:]
        kept, dropped = [header], []
        for i, row in enumerate(body):
            value = dict(zip(header, row))
            if keep(value):
                kept.append(row)
            else:
                dropped.append((i, value))
        if dropped:
            (self.out / name).write_bytes(_csv_bytes(kept))
            self.changed.add(name)
        return dropped

    def _lines(self, split: str, gone: set[int]) -> None:
        if not gone:
            return
        name, count = f"{split}.jsonl", 0
        with open(self.files.path(name), "rb") as src, open(self.out / name, "wb") as dst:
            for count, line in enumerate(src, 1):
                if count not in gone:
                    dst.write(line)
                else:  # the stats count documents' bytes (`_subtract` skips a stat records do not keep)
                    self.sizes[split] += len(self.gpt.document_text(json.loads(line)).encode("utf-8"))
        expected = sum(1 for e in self.entries if e.split == split)
        if count != expected:
            raise Inconsistent(f"{name} holds {count} lines as bytes, {expected} as text")
        self.changed.add(name)

    # --- tokens ----------------------------------------------------------------------------------------

    def _shards(self, split: str, shards: list[Shard]) -> list[Shard]:
        """The split's shards, each without the removed documents' tokens and the end-of-text after each."""
        mine = [s for s in shards if s.split == split]
        parts = [self._tokens(s) for s in mine]
        documents = sum(1 for e in self.entries if e.split == split)
        starts, ends = spans(parts, self.manifest.eot_id, documents, lambda: self._lengths(split))
        mask = np.array([e.gone for e in self.entries if e.split == split])
        cuts = np.stack([starts[mask], ends[mask] + 1], axis=1)  # each removed span with its end-of-text
        keep = complement(cuts, sum(len(p) for p in parts))
        self.count("tokens", int((cuts[:, 1] - cuts[:, 0]).sum()))
        rewritten, offset = {}, 0
        for shard, part in zip(mine, parts):
            tokens, sha256 = cut(part, offset, keep, self.out / shard.file)
            rewritten[shard.file] = shard.model_copy(update={"tokens": tokens, "sha256": sha256})
            self.changed.add(shard.file)
            offset += len(part)
        return [rewritten.get(s.file, s) for s in shards]

    def _tokens(self, shard: Shard) -> np.ndarray:
        dtype = np.dtype(shard.dtype).newbyteorder("<")
        if shard.tokens == 0:
            return np.empty(0, dtype)
        part = np.memmap(self.files.path(shard.file), dtype=dtype, mode="r")
        if len(part) != shard.tokens:
            raise Inconsistent(f"{shard.file} holds {len(part)} tokens, the manifest says {shard.tokens}")
        return part

    def _lengths(self, split: str) -> list[int]:
        """Each of the split's documents' token count, encoded again with the version's tokenizer."""
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self.files.path(TOKENIZER)))
        texts = (d.text for d in purge_data.documents(self.files, self.manifest) if d.split == split)
        return [len(e.ids) for batch in batched(texts, ENCODE_BATCH) for e in tokenizer.encode_batch_fast(batch)]

    def _ragged(self, split: str, gone: set[int]) -> None:
        """Each `<split>.<field>.npy` of alignment records without the removed records' values."""
        records = sum(1 for e in self.entries if e.split == split)
        keep = np.array([n not in gone for n in range(1, records + 1)])
        for name in sorted(self.files.listing):
            if not (name.startswith(f"{split}.") and name.endswith(".npy")) or name.endswith(".offsets.npy"):
                continue
            offsets_name = name.removesuffix(".npy") + ".offsets.npy"
            values, offsets = np.load(self.files.path(name)), np.load(self.files.path(offsets_name))
            values, offsets = ragged_without(values, offsets, keep)
            np.save(self.out / name, values)
            np.save(self.out / offsets_name, offsets)
            self.changed.update({name, offsets_name})

    # --- ledger and audit --------------------------------------------------------------------------------

    def _ledger(self, gone: set[str]) -> int | None:
        """The ledger without the removed documents' rows and signatures; its new length (None: no ledger)."""
        if LEDGER not in self.files.listing:
            return None
        rows = sum(1 for _ in _read_rows(self.files.path(LEDGER)))
        removed = [i for i, _ in self._csv(LEDGER, lambda row: row["sha256"] not in gone)]
        self.count("ledger rows", len(removed))
        if SIGNATURES in self.files.listing:
            signatures = np.load(self.files.path(SIGNATURES))
            if len(signatures) != rows:
                raise Inconsistent(f"{rows} ledger rows but {len(signatures)} signatures")
            if removed:  # row for row: the n-th signature is the n-th row's
                np.save(self.out / SIGNATURES, np.delete(signatures, removed, axis=0))
                self.changed.add(SIGNATURES)
            self.count("signatures", len(removed))
        return rows - len(removed)

    def _names(self, text: str) -> bool:
        return any(names_in(text, name) for name in self.names)

    def _audit(self) -> None:
        marked = {f.file: set(f.entries) for f in self.hit.files if f.file in ("audit.json", "audit.md")}
        removed = self.removed.get("documents", 0)
        if "audit.json" in self.files.listing:
            audit = json.loads(self.files.path("audit.json").read_text(encoding="utf-8"))
            rules, dropped = audit.get("rules", audit), 0
            for rule, record in sorted(rules.items()):
                if not isinstance(record, dict) or "examples" not in record:
                    continue
                examples = list(enumerate(record["examples"], 1))
                record["examples"] = [
                    ex
                    for k, ex in examples
                    if f"{rule} example {k}" not in marked.get("audit.json", set())
                    and not self._names(json.dumps(ex, ensure_ascii=False))
                ]
                dropped += len(examples) - len(record["examples"])
            if removed and isinstance(audit.get("docs_out"), int):
                audit["docs_out"] -= removed
            if dropped or (removed and "docs_out" in audit):
                text = json.dumps(audit, indent=1, ensure_ascii=False)  # as `foundry.data.audit.write` writes it
                (self.out / "audit.json").write_text(text, encoding="utf-8")
                self.changed.add("audit.json")
            self.count("audit examples", dropped)
        if "audit.md" in self.files.listing:
            self._audit_md(marked.get("audit.md", set()), removed)

    def _audit_md(self, marked: set[str], removed: int) -> None:
        lines = self.files.path("audit.md").read_text(encoding="utf-8").splitlines(keepends=True)
        new = [line for n, line in enumerate(lines, 1) if f"line {n}" not in marked and not self._names(line)]
        self.count("audit lines", len(lines) - len(new))
        if removed:
            new = [_kept_line(line, removed) for line in new]
        if new != lines:
            (self.out / "audit.md").write_text("".join(new), encoding="utf-8")
            self.changed.add("audit.md")

    # --- the manifest ------------------------------------------------------------------------------------

    def _manifest(self, shards: list[Shard], ledger: int | None) -> None:
        old = self.manifest
        stats = dict(old.stats)
        unit = self.gpt.unit
        for split in SPLITS:
            mine = [r for r in self.rows if r["split"] == split]
            _subtract(stats, f"{split}_{unit}", len(mine))
            _subtract(stats, f"{split}_bytes", self.sizes[split])
        _subtract(stats, f"{unit}_out", len(self.rows))
        if self.rows:
            stats["purged"] = stats.get("purged", 0) + len(self.rows)
        if self.gpt.tokens_in_shards:
            tokens = {s: sum(sh.tokens for sh in shards if sh.split == s) for s in SPLITS}
        else:
            tokens = {s: old.tokens(s) - sum(int(r["tokens"]) for r in self.rows if r["split"] == s) for s in SPLITS}
        update = {"stats": stats, "train_tokens": tokens["train"], "holdout_tokens": tokens["holdout"]}
        if old.shards is not None:
            update["shards"] = shards
        if old.ledger is not None and ledger is not None:
            update["ledger"] = old.ledger.model_copy(update={"documents": ledger})
        if old.files is not None:
            update["files"] = {**old.files, **{n: fast_digest(self.out / n) for n in sorted(self.changed)}}
        DatasetManifest.model_validate(old.model_copy(update=update).model_dump()).write(self.out)


def _subtract(stats: dict[str, int], key: str, n: int) -> None:
    if key in stats:
        stats[key] -= n


def _kept_line(line: str, removed: int) -> str:
    """The audit summary's "N documents read, M kept." with M less the removed documents."""
    words = line.rstrip("\n").split(" ")
    if len(words) == 5 and words[1:3] == ["documents", "read,"] and words[4] == "kept." and words[3].isdigit():
        return " ".join([*words[:3], str(int(words[3]) - removed), "kept."]) + line[len(line.rstrip("\n")) :]
    return line


def _read_rows(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        yield from csv.DictReader(fh)


def _csv_bytes(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode("utf-8")
