"""What `foundry purge` found: one typed value, counts and object ids only.

A purge exists to make text disappear, so its plan (printed, logged, kept as a record) never holds the text it
looks for: documents are named by their sha256 (as `prepare` computes it: the cleaned text's UTF-8 bytes), files
by their data version, path in it and DVC md5, places in a file by line, row or token range, and the criterion
itself by a keyed hash (a regex or a path may be the very name a person asked to have forgotten).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

SHA256 = re.compile(r"[0-9a-f]{64}")
LEFT_IN_STORES = "records left (cannot be removed through the API)"  # a count: `TraceHit.action` "left"


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Criterion(_Value):
    """What to purge: documents whose text a regex matches, one document by its sha256, or every document read
    from one source file (its name as `documents.csv` and the ledger record it: relative to the source root)."""

    kind: Literal["match", "document", "source"]
    value: str

    @field_validator("value")
    @classmethod
    def _checked(cls, value: str, info) -> str:
        kind = info.data.get("kind")
        if not value:
            raise ValueError(f"--{kind} needs a value")
        if kind == "document" and not SHA256.fullmatch(value):
            raise ValueError(f"--document takes a document's sha256 (64 lower-case hex digits), not {value!r}")
        if kind == "match":
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"--match is not a regular expression: {exc}") from None
        return value

    @property
    def pattern(self) -> re.Pattern | None:
        return re.compile(self.value) if self.kind == "match" else None  # `re` caches the compiled pattern

    def selects(self, text: str, sha256: str, name: str) -> bool:
        """Whether a document (its text, sha256 and the source file it was read from) is to be purged."""
        if self.kind == "match":
            return self.pattern.search(text) is not None
        if self.kind == "document":
            return sha256 == self.value
        return names_source(name, self.value)

    def label(self, key: bytes | None) -> str:
        """The criterion as the plan and the record show it: a document's sha256 as is; a regex or a path by its
        HMAC-SHA256 under this home's purge key (`purge_record.criterion_key`), since a plain hash would let
        anyone holding the record confirm a guessed name. `key` None (a dry run on a home no purge was applied
        on, which it must not change): the regex or path is not shown at all."""
        if self.kind == "document":
            return f"document {self.value}"
        if key is None:
            return f"{self.kind} (hidden: keyed hmac-sha256 once a purge is applied on this home)"
        return f"{self.kind} hmac-sha256:{hmac.new(key, self.value.encode(), hashlib.sha256).hexdigest()[:32]}"


def names_source(where: str, source: str) -> bool:
    """Whether a document's `where` (`file`, or `file:line` for a `.jsonl` record) was read from `source`."""
    return where == source or where.startswith(source + ":")


@functools.lru_cache(maxsize=4096)
def _name_pattern(name: str) -> re.Pattern:
    return re.compile(r"(?<![\w./-])" + re.escape(name) + r"(?!\w)")


@functools.lru_cache(maxsize=4096)
def _bare_pattern(name: str) -> re.Pattern:
    return re.compile("^" + re.escape(name) + r"(?::\d+)?$|^" + re.escape(name) + r":\d")


def is_bare(name: str) -> bool:
    """Whether a name is a bare word (`email`: no suffix, no folder, no `:line`), which prose and config lists
    hold as a word without naming the file."""
    return not re.search(r"[/\\]|.\.|:\d", name)


def names_in(text: str, name: str, whole: bool = True) -> bool:
    """Whether `text` names `name` (a source file or a ledger name, `file:line`) as a whole: between characters
    that cannot be part of a name, so that `file.jsonl:3` is not found in `file.jsonl:30` nor `a.txt` in
    `data.txt`. A bare word (`is_bare`: `email`) counts only as the whole text or a record's place (`email:3`),
    never as a word of a sentence or a list (`data.pii`: `['email', 'phone']`); `whole` False (a JSON key, or a
    string item of a JSON list: `["email", "phone"]` is a list of words) only as a record's place. The one rule for every place a
    purge looks for a name (audit, ledger, artifacts, home files; Prefect's and MLflow's records add a path's
    last components: `trace_stores.named_in`)."""
    if not name:
        return False
    if is_bare(name):
        found = _bare_pattern(name).search(text.strip())
        return found is not None and (whole or found.group().startswith(name + ":"))
    return _name_pattern(name).search(text) is not None


class Location(_Value):
    """One file of a data version that holds matched documents, and where in it."""

    file: str  # path inside the data version
    md5: str  # its DVC object id: the same object may belong to several versions
    holds: Literal["text", "tokens", "row", "signature", "name", "image"]  # image: a shard's (png, cls) members
    entries: tuple[str, ...]  # "line 3", "row 7", "tokens 120-245 (verified)": positions, never text


class Copy(_Value):
    """A place a data version's files lie: which of the files that hold matched documents are there."""

    place: Literal["workspace cache", "hydration cache", "remote", "hydrated copy", "workspace"]
    where: str
    files: tuple[str, ...]  # object ids (a cache or remote) or paths (a folder) present there


class DataHit(_Value):
    """A data version that holds matched documents' text, or lists them in its ledger only."""

    data_version: str
    kind: str  # text documents, or chat/preference records
    documents: tuple[str, ...]  # sha256 of each matched document whose text it holds
    listed: tuple[str, ...]  # sha256 of matched documents its ledger lists without holding their text
    files: tuple[Location, ...]
    copies: tuple[Copy, ...]

    @property
    def holds_text(self) -> bool:
        return bool(self.documents)


_RENAMED_HOLDS = {"image": "plot"}  # an `ArtifactHit.holds` value as plans before the rename wrote it


class ArtifactHit(_Value):
    """A file in the MLflow artifact store with strings that hold a matched document (or match the regex)."""

    path: str  # relative to the embedded artifact store's root; under `store`, the whole URI
    run_id: str  # the run that logged it ('' when the path names none: a logged model's files)
    strings: int  # how many of its strings hold one
    # The artifact location it lies under when that is not the embedded store (a tracking server's
    # `mlflow-artifacts:/1`, an `s3://…` bucket): read and rewritten through MLflow's artifact repository.
    store: str = ""
    # plot: a plot drawn from data images (an image run's misclassified-images grid, `purge_artifacts.grids`),
    # derived from the data, not data: deleted whole, never rewritten; `strings` is then 1.
    holds: Literal["text", "plot"] = "text"

    @field_validator("holds", mode="before")
    @classmethod
    def _plot_was_image(cls, value: object) -> object:
        # A plan written before the value was named for what it is (a `--json` output kept) said "image".
        return _RENAMED_HOLDS.get(value, value) if isinstance(value, str) else value


class HomeHit(_Value):
    """Another place under Foundry's home (or its Prefect store) with strings that hold a matched document: a
    run's working files, a downloaded source mirror, a log, a Prefect artifact on a run page."""

    place: str  # "run files", "source mirror", "log", "prefect artifact", a run's image plot (`purge_home`)
    where: str  # the path relative to the home (a source mirror's folder and `…`), or the Prefect artifact's id
    strings: int
    # The file itself, relative to the home: what `scrub` rewrites. Never printed nor serialised: a source
    # mirror's file name may be a person's name.
    path: str = Field("", exclude=True, repr=False)


class TraceHit(_Value):
    """A record Prefect or MLflow keeps in its own store (not a file) that holds a needle: a flow run's parameters
    or name, a deployment's or its schedule's parameters, a run state's message, a log line, an event; a run's
    params, tags, name or dataset inputs, a registered version's or model's tags or description (`purge_traces`).
    Named by ids and key names, never by the text."""

    store: Literal["prefect", "mlflow"]
    kind: str  # "flow run parameters", "task run state", "log", "run params", "version description"...
    # the flow run, deployment (DEPLOYMENT/SCHEDULE), state, log or event id; the MLflow run id;
    # models:/NAME/VERSION; a model's name
    id: str
    keys: tuple[str, ...] = ()  # the parameters, params or tags holding one (their names), or the dataset digests
    # redact: the value replaced by "[purged]"; delete: the record deleted; left: neither can be done (the
    # purge record lists it). `how`: through the store's API, or in the SQLite file of Foundry's own store.
    action: Literal["redact", "delete", "left"]
    how: Literal["api", "sqlite", ""] = ""

    @property
    def label(self) -> str:
        """How the record lists one left: the store, the kind, the id and the keys."""
        return f"{self.store} {self.kind} {self.id}" + (f" ({', '.join(self.keys)})" if self.keys else "")


class ModelHit(_Value):
    model: str  # models:/NAME/VERSION
    aliases: tuple[str, ...]
    why: str  # trained on an affected data version, or built from an affected parent
    purge_record: str | None = None  # the purge record a version is already tagged with (`foundry.purge`)


class Unchecked(_Value):
    """A place the dry run knows of but could not read: what `--apply` would have to check there."""

    what: str
    why: str


class PurgePlan(_Value):
    criterion: str  # `Criterion.label`
    reason: str
    documents: tuple[str, ...]  # sha256 of every matched document, sorted
    data_versions: tuple[DataHit, ...]
    artifacts: tuple[ArtifactHit, ...]
    elsewhere: tuple[HomeHit, ...] = ()
    traces: tuple[TraceHit, ...] = ()  # Prefect's and MLflow's own records (`purge_traces`)
    models: tuple[ModelHit, ...]
    runs: tuple[str, ...]  # runs that trained on (or prepared) an affected data version, registered or not
    unchecked: tuple[Unchecked, ...]
    scanned: dict[str, int]  # data versions read, artifact files read, registered versions read

    @computed_field
    @property
    def counts(self) -> dict[str, int]:
        return {
            "documents": len(self.documents),
            "data versions holding text": sum(1 for d in self.data_versions if d.holds_text),
            "data versions listing them": sum(1 for d in self.data_versions if not d.holds_text),
            "files": sum(len(d.files) for d in self.data_versions),
            "copies": sum(len(c.files) for d in self.data_versions for c in d.copies),
            "mlflow artifacts": len(self.artifacts),
            "other files": len(self.elsewhere),
            "prefect and mlflow records": sum(1 for t in self.traces if t.action != "left"),
            LEFT_IN_STORES: sum(1 for t in self.traces if t.action == "left"),
            "model versions": len(self.models),
            "runs": len(self.runs),
            "unchecked": len(self.unchecked),
        }


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]) - 1)]
    return "\n".join("  ".join([*(f"{v:<{w}}" for v, w in zip(r, widths)), r[-1]]).rstrip() for r in rows)


def _entries(location: Location) -> str:
    shown = ", ".join(location.entries[:4])
    return shown + (f", … ({len(location.entries)} in all)" if len(location.entries) > 4 else "")


def _held(holds: str) -> str:
    return "image (derived plot: deleted whole)" if holds == "plot" else holds


def _action(trace: TraceHit) -> str:
    if trace.action == "left":
        return "left, cannot be removed through the API"
    return f"{trace.action} ({'in its SQLite file' if trace.how == 'sqlite' else 'through the API'})"


def summary(plan: PurgePlan) -> str:
    """What `foundry purge` prints: the places, the models, what was not checked, then the counts."""
    lines = [f"purge {plan.criterion}: {plan.reason}", ""]
    rows = [("data version", "file", "object", "holds", "where in it")]
    for data in plan.data_versions:
        rows += [(data.data_version, f.file, f.md5, f.holds, _entries(f)) for f in data.files]
    lines += [table(rows) if len(rows) > 1 else "no data version holds a matching document", ""]
    copies = [("data version", "place", "files there", "where")]
    copies += [(d.data_version, c.place, str(len(c.files)), c.where) for d in plan.data_versions for c in d.copies]
    lines += [table(copies), ""] if len(copies) > 1 else []
    if plan.artifacts:
        rows = [("mlflow artifact", "run", "holds", "strings")]
        rows += [(a.path, a.run_id, _held(a.holds), str(a.strings)) for a in plan.artifacts]
        lines += [table(rows), ""]
    if plan.elsewhere:
        rows = [("place", "where", "strings")] + [(h.place, h.where, str(h.strings)) for h in plan.elsewhere]
        lines += [table(rows), ""]
    if plan.traces:
        rows = [("store", "record", "id", "keys", "--apply")]
        rows += [(t.store, t.kind, t.id, ",".join(t.keys) or "-", _action(t)) for t in plan.traces]
        lines += [table(rows), ""]
    if plan.models:
        lines += [
            table([("model version", "aliases", "why")] + [(m.model, ",".join(m.aliases), m.why) for m in plan.models])
        ]
        lines.append("")
    lines += [f"not checked: {u.what}: {u.why}" for u in plan.unchecked]
    counts = ", ".join(f"{n} {what}" for what, n in plan.counts.items())
    lines.append(f"dry run: {counts}; nothing was changed (--apply removes it)")
    return "\n".join(lines)
