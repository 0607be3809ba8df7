"""Stage A for alignment data: source manifest in, a self-describing dataset directory out.

Records are read (`formats.read_records`), checked and typed (`chat.parse_record`), scrubbed of personal
data like pretraining documents, encoded through the chat template with the tokenizer of the model
being aligned, and dropped when they do not fit its context. Exact duplicates go. The split is sticky
(`split_ledger`): records are grouped by what the user asked; a prompt the ledger lists keeps its split, and
new prompts go to the holdout by the smallest hashes, as documents do. The folder holds `train.jsonl` and
`holdout.jsonl` (the records as kept), `records.csv`, `tokenizer.json`, the ragged token arrays
(`<split>.<field>.npy`), `audit.json`/`audit.md` and `manifest.json` (`kind`: chat or preference).
It is versioned with DVC and hydrated like any prepared dataset.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
from collections import Counter
from pathlib import Path

from foundry.align import split_ledger
from foundry.align.records import KIND_OF, Conversation, RecordProblem, context_tokens, encode, parse_record, save_split
from foundry.config import FoundryConfig
from foundry.core.contracts import SourceManifest
from foundry.core.digests import folder_digests, sha256_file
from foundry.core.fs import remove_tree
from foundry.data import audit as audits
from foundry.data.audit import Audit
from foundry.data.formats import BadInputError, read_records
from foundry.data.ledger import Ledger, holdout_set
from foundry.data.manifest import FILE as MANIFEST_FILE
from foundry.data.manifest import DatasetManifest
from foundry.data.privacy import pii
from models.chat import ChatTemplate
from models.tokens import EOT, text_only

log = logging.getLogger(__name__)
SPLITS = ("train", "holdout")
# The code that shapes an alignment dataset: part of its cache key, as dvc.yaml's deps are for documents.
CODE = (
    "foundry/align/prepare.py",
    "foundry/data/manifest.py",
    "foundry/align/records.py",
    "foundry/align/split_ledger.py",
    "foundry/data/formats.py",
    "foundry/data/privacy/pii.py",
    "models/chat.py",
)


def align_dataset_key(
    config: FoundryConfig, source_digest: str, ledger: str = "", purged: set[str] | frozenset[str] = frozenset()
) -> str:
    """Same records, tokenizer, context, code, split ledger (`split_ledger.digest`) and purged records
    (`foundry.data.purged`): the same dataset (the cache key of the align flow's data task). The purged set
    joins the key only when a purge removed something, so keys made before purges existed stay."""
    from foundry.data.purged import digest as purged_digest
    from foundry.runtime.env import PROJECT_ROOT

    shaping = {
        "source_digest": source_digest,
        "data": config.data.model_dump(mode="json"),
        "method": config.align.method,
        "block_size": config.model.block_size,
        "tokenizer": sha256_file(Path(config.tokenizer.from_file)),
        "code": {name: sha256_file(PROJECT_ROOT / name) for name in CODE},
        "ledger": ledger,
    }
    if purged:
        shaping["purged"] = purged_digest(purged)
    return "align-dataset-" + hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()


def _rejecter(config: FoundryConfig, audit: Audit):
    def reject(where: str, reason: str, detail: str = "") -> None:
        if config.data.on_error == "fail":
            message = f"{where}: {reason.replace('_', ' ')} {detail}".strip()
            raise BadInputError(message + " (set data.on_error=skip to skip such records)")
        audit.removed(reason, where, detail)

    return reject


def _scrub(record: dict, kinds: list[str], found: list) -> dict:
    """Every string of the record through the PII scrubber; what it replaced goes to `found` as (kind, spans,
    example), for the audit to count once the record is known to be kept."""

    def walk(value):
        if isinstance(value, str):
            text, spans = pii.scrub(value, kinds)
            found.extend((kind, n, pii.example(text, kind)) for kind, n in spans.items())
            return text
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    return walk(record)


def _count_pii(audit: Audit, where: str, found: list) -> None:
    for kind, spans, example in found:
        audit.replaced(kind, where, spans, example)


def _read(
    source: SourceManifest, config: FoundryConfig, tokenizer, template: ChatTemplate, audit: Audit, purged=frozenset()
):
    """(sha256, record as kept, its arrays) for every acceptable record, in corpus order, and the count read.
    A record a purge removed (its sha256 in `purged`) is dropped and counted as "purged", never named."""
    reject, seen, kept, read = _rejecter(config, audit), set(), [], 0
    for entry in source.entries:
        for raw, where in read_records(entry.path, entry.name, config.data, reject):
            read += 1
            found: list = []
            try:
                record = parse_record(_scrub(raw, config.data.pii, found), config.align.method, template)
            except RecordProblem as problem:  # never kept, so never purged: its PII is counted as before
                _count_pii(audit, where, found)
                reject(where, problem.reason, problem.detail)
                continue
            text = json.dumps(record.to_json(), ensure_ascii=False, sort_keys=True)
            sha = hashlib.sha256(text.encode("utf-8")).hexdigest()  # what records.csv, and so a purge, lists
            if sha in purged:  # before its PII is counted: the audit quotes a PII example's text
                audit.counted("purged")
                continue
            _count_pii(audit, where, found)
            fields = encode(record, tokenizer, template)
            if context_tokens(fields) > config.model.block_size:
                reject(
                    where, "too_long_for_context", f"{context_tokens(fields)} tokens, context {config.model.block_size}"
                )
                continue
            if sha in seen:
                audit.removed("exact_duplicate", where)
                continue
            seen.add(sha)
            kept.append((sha, text, fields, where, record))
    return kept, read


def _row(sha: str, split: str, where: str, record, fields: dict) -> dict:
    turns = record.messages if isinstance(record, Conversation) else record.prompt
    return {
        "sha256": sha,
        "split": split,
        "source": where,
        "turns": len(turns) + (0 if isinstance(record, Conversation) else 1),
        "tokens": context_tokens(fields),
        "trained_tokens": sum(fields["trained"]) if "trained" in fields else len(fields["chosen"]),
    }


def _split(kept: list, fraction: float, ledger: Ledger) -> dict[str, str]:
    """{identity: split} for the records' prompts: the ledger's, then the content-hash rule for new ones."""
    sizes: dict[str, int] = {}
    for _, text, _, _, record in kept:
        key = split_ledger.identity(record)
        sizes[key] = sizes.get(key, 0) + len(text)
    sticky = ledger.split_of
    held = holdout_set(list(sizes.items()), fraction, sticky)
    new = sum(1 for key in sizes if key not in sticky)
    log.info("%d prompts: %d new, %d kept their split from the ledger", len(sizes), new, len(sizes) - new)
    return {key: "holdout" if key in held else "train" for key in sizes}


def prepare_aligned(
    source: SourceManifest,
    config: FoundryConfig,
    out_dir: Path,
    ledger: Path | None = None,
    purged: frozenset[str] = frozenset(),
) -> DatasetManifest:
    """Read, check, scrub, encode, de-duplicate and split the records into a fresh `out_dir`; returns the manifest.

    `ledger`: a folder holding the split ledger to build on (`split_ledger.head`); it is only read. `purged`:
    sha256 of records a purge removed (`foundry.data.purged.purged_documents`), dropped as "purged" should a
    source still hold them. The same records on the same ledger give the same bytes."""
    from tokenizers import Tokenizer

    template, kind = ChatTemplate(), KIND_OF[config.align.method]
    tokenizer = text_only(Tokenizer.from_file(config.tokenizer.from_file))  # a record's text is text, as in serving
    if out_dir.exists():
        remove_tree(out_dir, within=out_dir.parent)
    out_dir.mkdir(parents=True)
    audit = Audit()
    kept, read = _read(source, config, tokenizer, template, audit, purged)
    if len(kept) < 2:
        raise ValueError(
            f"{len(kept)} usable {kind} records of {read} read from {config.data.source_list}: training and the "
            f"holdout need one each; dropped {dict(audit_counts(audit))}"
        )
    split_of = _split(kept, config.data.holdout_fraction, split_ledger.read(ledger))
    if len(set(split_of.values())) < 2:
        raise ValueError(
            f"the {len(kept)} usable {kind} records ask {len(split_of)} distinct prompts, all given to "
            f"{next(iter(split_of.values()))} (by the split ledger {ledger}, or the hash rule): training and "
            "the holdout need one prompt each; add records with new prompts"
        )
    rows, by_split = [], {s: [] for s in SPLITS}
    files = {s: open(out_dir / f"{s}.jsonl", "w", encoding="utf-8") for s in SPLITS}
    try:
        for sha, text, fields, where, record in kept:
            split = split_of[split_ledger.identity(record)]
            files[split].write(text + "\n")
            by_split[split].append(fields)
            rows.append(_row(sha, split, where, record, fields))
    finally:
        for f in files.values():
            f.close()
    for split, records in by_split.items():
        save_split(out_dir, split, records, kind)
    _write_csv(out_dir / "records.csv", rows)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    audits.write(audit, read, len(kept), out_dir)
    return _manifest(out_dir, source, config, tokenizer, audit, read, rows)


def audit_counts(audit: Audit) -> Counter:
    return Counter({name: rule.documents for name, rule in audit.rules.items() if name not in pii.KINDS})


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _manifest(out_dir, source, config, tokenizer, audit, read, rows) -> DatasetManifest:
    kind = KIND_OF[config.align.method]
    count = Counter(r["split"] for r in rows)
    tokens = {s: sum(r["tokens"] for r in rows if r["split"] == s) for s in SPLITS}
    stats = {"records_in": read, "records_out": len(rows), **{f"{s}_records": count[s] for s in SPLITS}}
    stats.update({f"dropped_{reason}": n for reason, n in sorted(audit_counts(audit).items())})
    stats.update({f"pii_{k}_spans": r.spans for k, r in sorted(audit.rules.items()) if k in pii.KINDS})
    manifest = DatasetManifest(
        kind=kind,
        method=config.align.method,
        source=source.source,
        source_digest=source.digest,
        source_skipped=source.skipped,
        stats=stats,
        holdout_fraction=config.data.holdout_fraction,
        block_size=config.model.block_size,
        vocab_size=tokenizer.get_vocab_size(),
        eot_id=tokenizer.token_to_id(EOT),
        chat_template=ChatTemplate().to_dict(),  # the one `prepare` encoded with
        train_tokens=tokens["train"],
        holdout_tokens=tokens["holdout"],
        files=folder_digests(out_dir, skip=MANIFEST_FILE),
    )
    manifest.write(out_dir)
    log.info("prepared %d of %d %s records (%s)", len(rows), read, kind, dict(count))
    return manifest
