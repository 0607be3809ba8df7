"""The cleaning audit: per rule, how many documents it removed or changed, with a few examples.

Examples name the document and, for personal data, show scrubbed text around the placeholder:
never the removed data itself. Partitions keep their own audits, merged in partition order, so
the merged audit (like every other output) does not depend on how the corpus was partitioned.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from foundry.data import quality
from foundry.data.privacy import pii

log = logging.getLogger(__name__)

EXAMPLES = 3
# Stages in the order a document meets them; each rule belongs to one.
STAGES = {
    "input": (
        "unreadable",
        "not_regular_file",
        "symlink_outside_root",
        "unreachable_source",
        "empty_file",
        "binary",
        "invalid_utf8",
        "malformed_jsonl",
        "oversized_record",
        "missing_text_column",
        "null_text",
    ),
    "purge": ("purged",),  # a document `foundry purge --apply` removed, still in a source: dropped, never quoted
    "pii": pii.KINDS,
    "quality": quality.RULES,
    "dedup": ("exact_duplicate", "near_duplicate"),
}
STAGE_OF = {rule: stage for stage, rules in STAGES.items() for rule in rules}
# Routine, so not worth a warning each: package markers are empty files.
QUIET = {"empty_file"}


@dataclass
class Rule:
    documents: int = 0
    spans: int = 0
    examples: list[dict] = field(default_factory=list)


@dataclass
class Audit:
    """Counts and examples per rule; `merge` adds another partition's audit after this one's."""

    rules: dict[str, Rule] = field(default_factory=dict)

    def _rule(self, name: str) -> Rule:
        return self.rules.setdefault(name, Rule())

    def removed(self, rule: str, where: str, detail: str = "") -> None:
        entry = self._rule(rule)
        entry.documents += 1
        if len(entry.examples) < EXAMPLES:
            entry.examples.append({"document": where, **({"detail": detail} if detail else {})})
            if rule not in QUIET and len(entry.examples) == 1:
                # The line goes to the run page's log, which no purge can rewrite: the rule, never a name.
                log.info("dropped documents: %s (the first %d named in audit.json)", rule, EXAMPLES)

    def counted(self, rule: str) -> None:
        """A document removed without an example or a log line: a purged document's very name (its path) may
        be what a person asked to have forgotten."""
        self._rule(rule).documents += 1

    def replaced(self, rule: str, where: str, spans: int, excerpt: str | None) -> None:
        entry = self._rule(rule)
        entry.documents += 1
        entry.spans += spans
        if len(entry.examples) < EXAMPLES and excerpt is not None:
            entry.examples.append({"document": where, "excerpt": excerpt})

    def merge(self, other: Audit) -> Audit:
        for name, rule in other.rules.items():
            mine = self._rule(name)
            mine.documents += rule.documents
            mine.spans += rule.spans
            mine.examples = (mine.examples + rule.examples)[:EXAMPLES]
        return self

    def to_dict(self) -> dict:
        ordered = sorted(self.rules, key=lambda r: (list(STAGES).index(STAGE_OF.get(r, "input")), r))
        return {
            name: {
                "stage": STAGE_OF.get(name, "input"),
                "documents": self.rules[name].documents,
                "spans": self.rules[name].spans,
                "examples": self.rules[name].examples,
            }
            for name in ordered
        }

    @classmethod
    def from_dict(cls, data: dict) -> Audit:
        return cls({name: Rule(r["documents"], r["spans"], list(r["examples"])) for name, r in data.items()})


def summary(audit: dict, docs_in: int, docs_out: int) -> str:
    """A few lines a person reads first: what went in, what came out, and why the rest did not."""
    lines = ["# Cleaning audit", "", f"{docs_in} documents read, {docs_out} kept.", ""]
    for stage in STAGES:
        rules = {name: r for name, r in audit.items() if r["stage"] == stage}
        if not rules:
            continue
        lines.append(f"## {stage}")
        for name, rule in rules.items():
            what = (
                f"{rule['spans']} spans replaced in {rule['documents']} documents"
                if stage == "pii"
                else f"{rule['documents']} removed"
            )
            lines.append(f"- {name}: {what}")
            for ex in rule["examples"]:
                note = ex.get("excerpt") or ex.get("detail") or ""
                lines.append(f"    - {ex['document']}" + (f": {note}" if note else ""))
        lines.append("")
    return "\n".join(lines)


def write(audit: Audit, docs_in: int, docs_out: int, out_dir: Path) -> dict:
    data = audit.to_dict()
    (out_dir / "audit.json").write_text(
        json.dumps({"docs_in": docs_in, "docs_out": docs_out, "rules": data}, indent=1, ensure_ascii=False)
    )
    (out_dir / "audit.md").write_text(summary(data, docs_in, docs_out), encoding="utf-8")
    return data


def stage_table(audit: dict) -> list[dict]:
    """The data stage in rows a person scans (an `audit.json`): documents in and kept, drops by reason,
    personal data replaced by kind."""
    rows = [
        {"what": "documents in", "reason": "", "documents": audit["docs_in"], "spans": ""},
        {"what": "documents kept", "reason": "", "documents": audit["docs_out"], "spans": ""},
    ]
    for name, rule in audit["rules"].items():
        if rule["stage"] == "pii":
            rows.append(
                {"what": "PII replaced", "reason": name, "documents": rule["documents"], "spans": rule["spans"]}
            )
        else:
            rows.append(
                {"what": f"dropped ({rule['stage']})", "reason": name, "documents": rule["documents"], "spans": ""}
            )
    return rows


def stage_summary(audit: dict) -> str:
    """One line for the log at the end of the data stage: kept of read, then drops and PII by reason."""
    dropped = [f"{n} {r['documents']}" for n, r in audit["rules"].items() if r["stage"] != "pii"]
    pii = [
        f"{n} {r['spans']} spans in {r['documents']} documents"
        for n, r in audit["rules"].items()
        if r["stage"] == "pii"
    ]
    return (
        f"data: kept {audit['docs_out']} of {audit['docs_in']} documents; "
        f"dropped by reason: {', '.join(dropped) or 'none'}; PII replaced: {', '.join(pii) or 'none'}"
    )
