"""The purge record, and the registry's side of `foundry purge --apply`.

A record says who purged what, when and why, and what was found and removed: counts and object ids (data
versions, their replacements, model versions, runs, document sha256s), never the text. It is kept twice: as
an MLflow run of its own in the experiment `foundry-purges` (tags, the counts as metrics, the record as
`purge_record.json`), and printed. The affected model versions and runs are tagged `foundry.purge=<record>`;
each affected version loses every alias (`champion`, `challenger`…) unless the user keeps the models serving
(`--keep-models`).

The criterion (a regex or a source path may itself be the name a person asked to have forgotten) is shown by
its HMAC-SHA256 under a key of this home's own (`criterion_key`: 32 random bytes in
`$FOUNDRY_HOME/purged/criterion.key`, mode 0600, made by the first `--apply`): the same purge run again on the
same home gets the same label, and a record alone does not let anyone confirm a guessed name.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from foundry.core import version_tags as tag
from foundry.core.model_uri import ModelUri
from foundry.purge.plan import Criterion, ModelHit, table
from foundry.registry.versions import PURGE_EXPERIMENT
from foundry.registry.versions import PURGE_TAG as TAG  # what `purge --apply` tags an affected version and run with

EXPERIMENT = PURGE_EXPERIMENT
KEY_FILE = "purged/criterion.key"  # under $FOUNDRY_HOME, beside the purge marks (`foundry.data.purged`)
KEYED = "hmac-sha256, keyed with $FOUNDRY_HOME/purged/criterion.key"
UNKEYED = "sha256, unkeyed"
__all__ = [
    "EXPERIMENT",
    "TAG",
    "PurgeRecord",
    "criterion_key",
    "criterion_label",
    "keep",
    "summary",
    "tag_models",
    "tag_runs",
]


class PurgeRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    record: str  # purge-<UTC time>-<8 hex>: what marks, tags and the MLflow run name
    who: str
    when: str  # UTC, ISO 8601
    reason: str
    criterion: str  # `Criterion.label`: a regex or path by its HMAC-SHA256 under this home's key
    documents: tuple[str, ...]  # sha256 of each removed document
    replaced: dict[str, str | None]  # data version -> its replacement (None: deleted, not rewritten)
    removed: dict[str, int]  # what was removed or rewritten, by place
    models: tuple[str, ...]  # model versions tagged with the record
    lost_champion: tuple[str, ...]  # those that were champion and are no longer
    runs: tuple[str, ...]
    verified: bool  # a second search after the purge found no document
    left: dict[str, int] = {}  # what that second search still found, by kind (empty when verified)
    # Prefect's and MLflow's records holding the documents that no API can change and Foundry does not own the
    # store of (`TraceHit.label`: store, kind, id, keys): left, cannot be removed through the API.
    left_in_stores: tuple[str, ...] = ()
    mlflow_run_id: str = ""
    # How `criterion` hides a regex or a path (`KEYED`); a record made before keyed labels reads as UNKEYED.
    criterion_hash: str = UNKEYED


def criterion_key(home: Path, create: bool = True) -> bytes | None:
    """This home's purge key, made on first use (`create`) with mode 0600 and never rewritten; None when there
    is none and `create` is False (a dry run changes nothing). Written whole before anyone can read it: two
    purges making it at once agree on the one that was linked first."""
    path = home / KEY_FILE
    if not path.exists():
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(secrets.token_bytes(32))
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, path)  # fails, harmlessly, when another purge made it first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    if path.stat().st_mode & 0o077:  # readable by others: the labels it made are only as private as the key
        os.chmod(path, 0o600)
    key = path.read_bytes()
    if len(key) != 32:
        raise ValueError(f"{path} is not a purge key (32 bytes): restore it, or remove it to label from now on anew")
    return key


def criterion_label(home: Path, criterion: Criterion, create: bool = True) -> str:
    """`criterion` as plans and records name it, keyed with this home's purge key."""
    return criterion.label(None if criterion.kind == "document" else criterion_key(home, create))


def new_record_id() -> str:
    return f"purge-{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"


def who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user with no passwd entry
        return f"uid {os.getuid()}"


def tag_models(client, record: str, models: tuple[ModelHit, ...], keep_models: bool) -> list[str]:
    """Tag each affected version with the record; unless `keep_models`, take from each every alias it holds now
    (`champion`, `challenger`, any other: no `models:/NAME@ALIAS` serves it any more). Returns the versions that
    lost `champion`. Any registry error propagates: the purge reports it failed, and re-running it tags what is
    left (tags and alias deletions are idempotent)."""
    lost = []
    for model in models:
        uri = ModelUri.parse(model.model)
        name, version = uri.name, uri.version
        client.set_model_version_tag(name, version, TAG, record)
        if keep_models:
            continue
        aliases = client.get_model_version(name, version).aliases  # read now: an alias may have moved since the plan
        for alias in aliases:
            client.delete_registered_model_alias(name, alias)
        if "champion" in aliases:
            lost.append(model.model)
    return lost


def tag_runs(client, record: str, runs: tuple[str, ...]) -> None:
    for run_id in runs:
        client.set_tag(run_id, TAG, record)


def keep(client, record: PurgeRecord) -> PurgeRecord:
    """The record as an MLflow run of its own; returns it with the run's id."""
    from foundry.runtime import tracking

    experiment = tracking.experiment_id(EXPERIMENT)
    tags = {TAG: record.record, tag.PURGE_WHO: record.who, tag.PURGE_CRITERION: record.criterion}
    run = client.create_run(experiment, run_name=record.record, tags=tags)
    kept = record.model_copy(update={"mlflow_run_id": run.info.run_id})
    client.log_param(run.info.run_id, "reason", record.reason[:6000])
    for key, value in {**record.removed, "documents": len(record.documents), "models": len(record.models)}.items():
        client.log_metric(run.info.run_id, _metric_key(key), float(value))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "purge_record.json"
        path.write_text(kept.model_dump_json(indent=1))
        client.log_artifact(run.info.run_id, str(path))
    client.set_terminated(run.info.run_id, "FINISHED")
    return kept


def _metric_key(key: str) -> str:
    return "purged_" + "".join(c if c.isalnum() else "_" for c in key).strip("_")


def summary(record: PurgeRecord) -> str:
    """What `foundry purge --apply` prints: the record, ids and counts only."""
    lines = [f"purge record {record.record} ({record.when}, by {record.who}): {record.reason}", ""]
    if record.replaced:
        rows = [("data version", "now")] + [(v, new or "deleted") for v, new in sorted(record.replaced.items())]
        lines += [table(rows), ""]
    if record.models:
        rows = [("model version", "champion")]
        rows += [(m, "removed" if m in record.lost_champion else "-") for m in record.models]
        lines += [table(rows), ""]
    lines.append("removed: " + ", ".join(f"{n} {what}" for what, n in sorted(record.removed.items()) if n))
    lines.append(
        f"{len(record.documents)} documents; "
        + (
            "verified: a second search finds none"
            if record.verified
            else "NOT verified: a second search still finds some"
        )
    )
    if record.left_in_stores:
        lines.append(f"left, cannot be removed through the API ({len(record.left_in_stores)}):")
        lines += [f"  {label}" for label in record.left_in_stores]
    if record.mlflow_run_id:
        lines.append(f"kept in MLflow: experiment {EXPERIMENT}, run {record.mlflow_run_id}")
    return "\n".join(lines)


def as_json(record: PurgeRecord) -> str:
    return json.dumps(record.model_dump(mode="json"), indent=1)
