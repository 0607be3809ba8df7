"""Stage A, clean: decode, normalise, filter, de-duplicate and split documents, streaming.

Each document is read, judged and written out before the next is read, so memory holds one
document plus the set of content hashes seen so far.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from foundry.config import DataConfig

log = logging.getLogger(__name__)


class BadInputError(RuntimeError):
    """A source file that cannot be used while `data.on_error` is `fail`."""


@dataclass
class CleanStats:
    docs_in: int = 0
    docs_out: int = 0
    dropped: Counter = field(default_factory=Counter)
    split_docs: Counter = field(default_factory=Counter)
    split_bytes: Counter = field(default_factory=Counter)

    def as_metrics(self) -> dict[str, int]:
        metrics = {"docs_in": self.docs_in, "docs_out": self.docs_out}
        metrics.update({f"dropped_{reason}": n for reason, n in sorted(self.dropped.items())})
        metrics.update({f"{split}_docs": n for split, n in self.split_docs.items()})
        metrics.update({f"{split}_bytes": n for split, n in self.split_bytes.items()})
        return metrics


def normalise(text: str) -> str:
    """NFC, unix newlines, no trailing whitespace on lines, one trailing newline."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in text.split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def quality_problem(text: str, cfg: DataConfig) -> str | None:
    """The name of the first quality rule the document breaks, or None."""
    if len(text) < cfg.min_chars:
        return "too_short"
    if len(text) > cfg.max_chars:
        return "too_long"
    if max(len(line) for line in text.split("\n")) > cfg.max_line_chars:
        return "long_line"
    if sum(ch.isalpha() for ch in text) < cfg.min_alpha_fraction * len(text):
        return "low_alpha"
    return None


def holdout_split(sha256: str, fraction: float) -> str:
    """Deterministic by content: the same document lands in the same split on every machine."""
    return "holdout" if int(sha256[:8], 16) / 0x1_0000_0000 < fraction else "train"


def _texts_of(path: str, name: str, cfg: DataConfig, stats: CleanStats) -> Iterator[str]:
    raw = Path(path).read_bytes()
    if not raw.strip():
        yield from _reject(name, "empty_file", cfg, stats)
        return
    if b"\x00" in raw:
        yield from _reject(name, "binary", cfg, stats)
        return
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield from _reject(name, "invalid_utf8", cfg, stats, detail=str(exc))
        return
    if not name.endswith(".jsonl"):
        yield text
        return
    # Not splitlines(): JSON strings may hold U+2028 and friends unescaped.
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)[cfg.jsonl_text_field]
            if not isinstance(value, str):
                raise TypeError(f"field {cfg.jsonl_text_field!r} is not a string")
        except (ValueError, KeyError, TypeError) as exc:
            yield from _reject(f"{name}:{lineno}", "malformed_jsonl", cfg, stats, detail=repr(exc))
            continue
        yield value


def _reject(name: str, reason: str, cfg: DataConfig, stats: CleanStats, detail: str = "") -> Iterator[str]:
    if cfg.on_error == "fail":
        raise BadInputError(f"{name}: {reason.replace('_', ' ')} {detail}".strip() + " (set data.on_error=skip to skip such input)")
    stats.dropped[reason] += 1
    # Empty files are routine (package markers); everything else deserves a warning.
    (log.debug if reason == "empty_file" else log.warning)("skipping %s: %s %s", name, reason, detail)
    return iter(())


def clean_documents(entries: list[dict], cfg: DataConfig, out_dir: Path, progress: bool = True) -> CleanStats:
    """Write `train.jsonl`, `holdout.jsonl` and `documents.csv` (one row per kept document)."""
    from tqdm.auto import tqdm

    out_dir.mkdir(parents=True, exist_ok=True)
    stats, seen = CleanStats(), set()
    outputs = {split: open(out_dir / f"{split}.jsonl", "w", encoding="utf-8") for split in ("train", "holdout")}
    table = open(out_dir / "documents.csv", "w", encoding="utf-8", newline="")
    rows = csv.writer(table)
    rows.writerow(["sha256", "split", "chars", "bytes", "source"])
    try:
        for entry in tqdm(entries, desc="clean", unit="file", disable=not progress, mininterval=2):
            for text in _texts_of(entry["path"], entry["name"], cfg, stats):
                stats.docs_in += 1
                text = normalise(text)
                problem = quality_problem(text, cfg)
                if problem:
                    stats.dropped[problem] += 1
                    continue
                encoded = text.encode("utf-8")
                digest = hashlib.sha256(encoded).hexdigest()
                if digest in seen:
                    stats.dropped["duplicate"] += 1
                    continue
                seen.add(digest)
                split = holdout_split(digest, cfg.holdout_fraction)
                outputs[split].write(json.dumps({"text": text, "source": entry["name"]}, ensure_ascii=False) + "\n")
                rows.writerow([digest, split, len(text), len(encoded), entry["name"]])
                stats.docs_out += 1
                stats.split_docs[split] += 1
                stats.split_bytes[split] += len(encoded)
    finally:
        for fh in (*outputs.values(), table):
            fh.close()
    return stats


def iter_texts(jsonl_path: Path) -> Iterator[str]:
    with open(jsonl_path, encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)["text"]
