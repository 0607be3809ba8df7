"""Stage A, prepare: source manifest in, a self-describing dataset directory out.

The directory (the `prepared` output of `dvc.yaml`) holds `train.jsonl`, `holdout.jsonl`,
`documents.csv`, `tokenizer.json`, the token shards, `audit.json`/`audit.md` and `manifest.json`.

The work alternates between map steps over partitions, which `mapper` may run anywhere (in this
process by default; as Prefect tasks on Dask workers through `tasks.data_parallel`), and global steps in
this process: de-duplication and the split, tokenizer training, cutting shards. Map steps read and
write files under a scratch folder beside `out_dir`, which workers must be able to reach.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from foundry.config import DataConfig, FoundryConfig, TokenizerConfig
from foundry.core.contracts import SourceFile
from foundry.core.digests import folder_digests
from foundry.core.fs import remove_tree
from foundry.core.preparing import Mapper, Preparing
from foundry.core.process_pool import serial_map
from foundry.data import audit as audits
from foundry.data import ledger as ledgers
from foundry.data.manifest import FILE as MANIFEST_FILE
from foundry.data.manifest import DatasetManifest, LedgerRecord
from foundry.data.prepared import Prepared
from foundry.data.progress import PrepareProgress
from foundry.pretrain.clean import CleanStats, PartitionJob, Selection, clean_partition, iter_texts, select_documents
from foundry.pretrain.shards import EncodeJob, assemble_shards, encode_chunk, token_dtype, train_tokenizer
from models.tokens import EOT

log = logging.getLogger(__name__)


# Samples larger than this train the tokenizer in a child process (`_tokenizer`); the default corpus's is smaller.
CHILD_SAMPLE_BYTES = 16 << 20


def partition_count(entries: list[SourceFile], cfg: DataConfig, workers: int) -> int:
    """A multiple of the worker count, large enough that partitions average at most `partition_bytes`."""
    total = sum(e.size for e in entries)
    wanted = max(workers, math.ceil(total / cfg.partition_bytes))
    return max(1, min(len(entries), workers * math.ceil(wanted / workers)))


def partitions(entries: list[SourceFile], count: int) -> list[list[SourceFile]]:
    """Contiguous runs of files (corpus order is kept) of roughly equal size."""
    total = sum(max(e.size, 1) for e in entries)
    parts: list[list[SourceFile]] = [[] for _ in range(count)]
    seen = 0
    for entry in entries:
        parts[min(count - 1, int(seen * count / total))].append(entry)
        seen += max(entry.size, 1)
    return [part for part in parts if part]


def _scratch(out_dir: Path) -> Path:
    work = out_dir.parent / f".{out_dir.name}.work"
    remove_tree(work, within=out_dir.parent, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def _encode_jobs(out_dir: Path, work: Path, chunks: list[dict]) -> tuple[list[EncodeJob], dict[str, list[dict]]]:
    """Job k encodes the k-th byte range of each split: one task a worker, the splits balanced."""
    ranges = [
        {
            "split": c["split"],
            "texts": str(out_dir / f"{c['split']}.jsonl"),
            "start": c["start"],
            "end": c["end"],
            "out": str(work / f"tokens_{i:05d}.bin"),
        }
        for i, c in enumerate(chunks)
    ]
    by_split = {split: [r for r in ranges if r["split"] == split] for split in ("train", "holdout")}
    jobs = [
        EncodeJob(str(out_dir / "tokenizer.json"), tuple(rs[k] for rs in by_split.values() if k < len(rs)))
        for k in range(max(map(len, by_split.values())))
    ]
    return jobs, by_split


def _sample(texts: Iterator[str], rate: float) -> Iterator[str]:
    """The texts whose content hash falls below `rate`: a uniform sample, the same on every run."""
    for text in texts:
        if rate >= 1 or int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) < rate * 0x1_0000_0000:
            yield text


def _tokenizer(config: FoundryConfig, out_dir: Path, stats: CleanStats):
    """Written to `out_dir`: trained on (a sample of at most `max_train_bytes` of) the train split, or
    `tokenizer.from_file` (fine-tuning keeps its parent's)."""
    from tokenizers import Tokenizer

    cfg, path = config.tokenizer, out_dir / "tokenizer.json"
    if cfg.from_file:
        tokenizer = Tokenizer.from_file(cfg.from_file)
        tokenizer.save(str(path))
        return tokenizer
    rate = cfg.max_train_bytes / max(stats.split_bytes["train"], 1)
    job = {"texts": str(out_dir / "train.jsonl"), "rate": rate, "cfg": cfg.model_dump(), "out": str(path)}
    job["length"] = round(stats.split_docs["train"] * min(rate, 1))
    if min(cfg.max_train_bytes, stats.split_bytes["train"]) <= CHILD_SAMPLE_BYTES:
        train_sample(job)  # a small sample: not worth an interpreter's start (~0.5 s)
        return Tokenizer.from_file(str(path))
    # In a fresh interpreter: the trainer's memory grows with the words of its sample (~170 MB at 32 MB of
    # text) and what it freed stays in this process's heap, which would then grow with the corpus.
    code = "import json, sys; from foundry.pretrain.prepare import train_sample; train_sample(json.loads(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, json.dumps(job)], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"training the tokenizer in a child process failed:\n{done.stderr[-3000:]}")
    return Tokenizer.from_file(str(path))


def train_sample(job: dict) -> None:
    """`_tokenizer`'s job, here or in its child: train on the sample of a split file and save the tokenizer."""
    texts = _sample(iter_texts(Path(job["texts"])), job["rate"])
    tokenizer = train_tokenizer(texts, TokenizerConfig(**job["cfg"]), length=job["length"])
    tokenizer.save(job["out"])


def _tokenize(
    config: FoundryConfig, out_dir: Path, work: Path, chunks: list[dict], stats: CleanStats, mapper: Mapper
) -> dict:
    """The manifest's tokenizer and shard fields."""
    tokenizer = _tokenizer(config, out_dir, stats)
    jobs, by_split = _encode_jobs(out_dir, work, chunks)
    encoded = {
        r["out"]: e for job, results in zip(jobs, mapper(encode_chunk, jobs)) for r, e in zip(job.ranges, results)
    }
    dtype = token_dtype(tokenizer.get_vocab_size())
    shards = []
    for split, ranges in by_split.items():
        shards += assemble_shards([encoded[r["out"]] for r in ranges], out_dir, split, config.data.shard_tokens, dtype)
    tokens = {split: sum(s["tokens"] for s in shards if s["split"] == split) for split in ("train", "holdout")}
    return {
        "vocab_size": tokenizer.get_vocab_size(),
        "eot_id": tokenizer.token_to_id(EOT),
        "dtype": dtype.name,
        "shards": shards,
        "train_tokens": tokens["train"],
        "holdout_tokens": tokens["holdout"],
    }


def prepare(job: Preparing) -> Prepared:
    """Clean, split and tokenize into a fresh `job.out_dir`; returns the dataset manifest and the `lineage`
    counts against the parent's ledger, which stay out of the dataset so that the same documents on the same
    ledger give the same bytes, hence the same data version.

    `job.basis`: the parent data version whose split ledger this one builds on, the share of its training documents
    replayed (retraining: the train split holds the new documents and that share of the parent's) and the
    documents a purge removed. `job.progress`: a bar on the terminal; `job.running`: where the map steps run and
    where preparation reports how far it is. The output is the same, byte for byte, however it runs."""
    source_manifest, config, out_dir, basis, running = job.source, job.config, job.out_dir, job.basis, job.running
    mapper, workers, purged = running.mapper or serial_map, running.workers, basis.purged
    lineage = _lineage(basis.parent, config, basis.replay_fraction)
    if out_dir.exists():
        remove_tree(out_dir, within=out_dir.parent)
    out_dir.mkdir(parents=True)
    work = _scratch(out_dir)
    try:
        entries = source_manifest.entries
        counter = PrepareProgress(running.progress_file, len(entries), config.data.progress_every_s)
        counter.report()
        parts = partitions(entries, partition_count(entries, config.data, workers)) if entries else []
        here = mapper is serial_map  # a job run elsewhere counts and draws nothing here
        jobs = [
            PartitionJob(i, part, config.data, str(work), job.progress and here, counter if here else None, purged)
            for i, part in enumerate(parts)
        ]
        # A job run here counts its files as it goes; one run elsewhere, when it comes back.
        counted = None if here else lambda job, result: counter.cleaned(len(job.entries), result["docs_in"])
        cleaned = mapper(clean_partition, jobs, counted)
        counter.reached("de-duplicating", len(entries), sum(c["docs_in"] for c in cleaned))
        selection = select_documents(jobs, cleaned, config.data, out_dir, chunks_per_split=workers, lineage=lineage)
        stats = selection.stats
        counter.reached("tokenizing")
        _check_splits(selection, config)
        tokens = _tokenize(config, out_dir, work, selection.chunks, stats, mapper)
    finally:
        remove_tree(work, within=out_dir.parent, ignore_errors=True)
    audits.write(selection.audit, stats.docs_in, stats.docs_out, out_dir)
    selection.ledger.write(out_dir)
    manifest = DatasetManifest(
        source=source_manifest.source,
        source_digest=source_manifest.digest,
        source_skipped=source_manifest.skipped,
        stats=stats.as_metrics(),
        holdout_fraction=config.data.holdout_fraction,
        ledger=LedgerRecord(documents=len(selection.ledger), signing=ledgers.signing(config.data)),
        **tokens,
        files=folder_digests(out_dir, skip=MANIFEST_FILE),  # written last: it lists every other file
    )
    manifest.write(out_dir)
    counter.reached("done")
    log.info(
        "prepared %d of %d documents: %d train / %d holdout tokens; dropped %s",
        stats.docs_out,
        stats.docs_in,
        manifest.train_tokens,
        manifest.holdout_tokens,
        dict(stats.dropped),
    )
    return Prepared(manifest=manifest, lineage=selection.lineage)


def _check_splits(selection: Selection, config: FoundryConfig) -> None:
    """A plain message before the expectations: with nothing to train on or to hold out, every later
    check would fail at once and none of them would say why."""
    stats, sources = selection.stats, config.data.source_list
    if stats.split_docs["train"] == 0:
        raise ValueError(
            f"no training documents left after cleaning {stats.docs_in} documents from {sources}: "
            f"dropped {dict(stats.dropped)}, {selection.lineage['not_replayed_docs']} old ones not replayed; "
            "check the quality thresholds in the data section (or retrain.replay_fraction)"
        )
    if stats.split_docs["holdout"] == 0:
        raise ValueError(
            f"need at least two documents, one to train on and one to hold out for evaluation: {stats.docs_out} of "
            f"{stats.docs_in} documents from {sources} left after cleaning (dropped {dict(stats.dropped)}); "
            "add documents to the source or loosen the quality thresholds in the data section"
        )


def _lineage(parent: Path | None, config: FoundryConfig, replay_fraction: float | None) -> ledgers.Lineage | None:
    if parent is None:
        if replay_fraction is not None:
            raise ValueError("replaying old training documents needs the parent data version they come from")
        return None
    ledgers.check_signing(DatasetManifest.read(parent), config.data)
    ledger = ledgers.Ledger.read(parent, config.data.near_dup_num_perm)
    return ledgers.Lineage(ledger, replay_fraction, salt=ledgers.identity(parent))


def prepare_metrics(manifest: DatasetManifest) -> dict[str, float]:
    """The counts worth a chart in MLflow: documents in and out, drops by reason, PII replaced, tokens."""
    return {
        **manifest.data_metrics(),
        "data/train_tokens": manifest.train_tokens,
        "data/holdout_tokens": manifest.holdout_tokens,
    }
