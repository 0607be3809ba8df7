"""Stage E, the registry: a model version per pipeline run, `challenger` always, `champion` only
through the gate (`foundry.registry.gate`) or a reviewer (`promote_manually`).

Publication is one unit (`publish`): the version is created with its tags and model card in one call,
marked pending, then takes its aliases and is marked complete; if any step fails, the aliases it took
are given back and the version is deleted. If even that fails (the tracking server went away), the
version stays marked pending: `champion` reads past it to the version it replaced, and the next publication
of the model withdraws it (`recover`, the one place that does): a failed run does not leave a version
behind, least of all one that looks promoted.
Look-ups fail closed: only "no such model" or "no such alias" means nothing is there; any other error
(a tracking server that is down, a database error) propagates and stops the run.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from foundry.core import gate_tags
from foundry.core import version_tags as tag
from foundry.core.contracts import Promotion
from foundry.core.fs import remove_tree
from foundry.core.model_uri import LoggedModelUri, ModelUri
from foundry.core.run_tags import RunTags
from foundry.core.version_tags import COMPLETE, PUBLICATION, PromotionTags, Publication
from foundry.registry import tags as registry_tags
from foundry.runtime.tracking import client

log = logging.getLogger(__name__)
ALIASES = ("challenger", "champion")  # the order they are set in: champion last


PURGE_TAG = tag.PURGE  # the purge record a version was tagged with (`foundry purge --apply`)
PURGE_EXPERIMENT = "foundry-purges"  # where the purge records are kept, one MLflow run each (never collected)


class PurgedModel(ValueError):
    """A version a purge tagged (trained on purged documents) was asked to become champion."""


def refuse_purged(version, refused: str, hint: str = "") -> None:
    """`PurgedModel` naming the purge record when a purge tagged `version`; `refused` says what it cannot be."""
    if record := (version.tags or {}).get(PURGE_TAG):
        raise PurgedModel(
            f"{ModelUri.of(version)} was trained on (or built from) data that purge record {record} "
            f"removed: it cannot be {refused}; train a new version on the purged data (`foundry purge --retrain`)"
            + hint
        )


ALLOW_HINT = (
    "; to use it anyway (it was kept with `purge --apply --keep-models`), pass --allow-purged "
    "(a flow run: its parameter allow_purged=true)"
)


def refuse_purged_versions(uris: list[str], refused: str, allowed: bool = False, hint: str = ALLOW_HINT) -> None:
    """Unless `allowed`, `refuse_purged` for each of `uris`, by what each alias names now; a URI the registry
    lacks is a LookupError naming it, and a registry that cannot be read stops the caller (fail closed). What
    every command and flow that reads a registered version runs first (`--allow-purged`, a flow's `allow_purged`):
    a deployment run started from the Prefect UI is refused by its flow, before any task."""
    from mlflow.exceptions import MlflowException

    if allowed:
        return
    for uri in uris:
        try:
            version = resolve(uri)
        except MlflowException as exc:
            if absent(exc):  # an input error, named, not MLflow's
                raise LookupError(f"{uri}: the registry has no such version or alias; nothing was {refused}") from exc
            raise
        refuse_purged(version, refused, hint)


class PublicationFailed(RuntimeError):
    """A version was created but could not take its aliases, nor be deleted again."""


def absent(exc: Exception) -> bool:
    """Whether an MLflow error says the registered model or alias does not exist, and nothing else."""
    from mlflow.exceptions import MlflowException

    if not isinstance(exc, MlflowException):
        return False
    if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
        return True
    # A missing alias is INVALID_PARAMETER_VALUE, from the SQL store and through a server alike.
    return exc.error_code == "INVALID_PARAMETER_VALUE" and bool(re.search(r"alias \S+ not found", exc.message))


def alias(name: str, which: str):
    """The model version `which` points to, or None when the model or the alias does not exist."""
    from mlflow.exceptions import MlflowException

    try:
        return client().get_model_version_by_alias(name, which)
    except MlflowException as exc:
        if absent(exc):
            return None
        raise


def champion(name: str):
    """The current champion's model version, or None when there is none; any other error propagates.
    A version whose publication did not complete is not champion: the one it replaced is, until the next
    publication withdraws it (`recover`)."""
    current = alias(name, "champion")
    for _ in range(100):  # a chain of dead publications, newest first; bounded against a cycle in bad tags
        if current is None or not Publication.is_pending(current.tags):
            return current
        replaced = registry_tags.replaced_version(current, "champion")
        current = client().get_model_version(name, replaced) if replaced else None
    raise RuntimeError(f"{name}: the champion alias leads through 100 half-published versions; run `recover`")


def _ensure_model(name: str) -> None:
    from mlflow.exceptions import MlflowException

    c = client()
    try:
        c.get_registered_model(name)
    except MlflowException as exc:
        if not absent(exc):
            raise
        try:
            c.create_registered_model(name, description="GPT-style language models trained by Foundry.")
        except MlflowException as race:
            if race.error_code != "RESOURCE_ALREADY_EXISTS":  # another run created it meanwhile
                raise


def register(model_uri: str, name: str, run_id: str, tags: dict[str, str], description: str = "") -> str:
    """A new version of `name` carrying `tags` and no alias, created in one call (whole or not at all)."""
    _ensure_model(name)
    # A tracking server insists on the logged model's id beside its models:/m-... source.
    model_id = LoggedModelUri.id_in(model_uri)
    created = client().create_model_version(
        name,
        source=model_uri,
        run_id=run_id,
        tags={k: str(v) for k, v in tags.items()},
        description=description,
        model_id=model_id,
    )
    return str(created.version)


def publish(
    model_uri: str,
    name: str,
    run_id: str,
    tags: dict[str, str],
    make_champion: bool,
    verdict: str,
    description: str = "",
) -> Promotion:
    """A new version of `name` with `tags` and `description`, aliased `challenger`, and `champion` when asked:
    all of it, or (after giving back the aliases it took and deleting the version) an exception.

    The version is created `pending`, with the versions its aliases replace; it is marked `complete` last.
    Versions a dead run left pending are withdrawn first (`recover`): the caller holds the model's promotion
    lock, as every publication does."""
    if withdrawn := recover(name):
        log.warning("withdrew versions %s of %s, left half-published", withdrawn, name)
    c = client()
    previous = {which: alias(name, which) for which in ALIASES}
    marks = Publication(replaces={which: "" if v is None else str(v.version) for which, v in previous.items()})
    version = register(model_uri, name, run_id, {**tags, **marks.as_tags()}, description)
    try:
        c.set_registered_model_alias(name, "challenger", version)
        if make_champion:
            c.set_registered_model_alias(name, "champion", version)
            c.set_model_version_tag(name, version, gate_tags.PROMOTED, gate_tags.flag(True))
        c.set_model_version_tag(name, version, PUBLICATION, COMPLETE)
    except Exception as exc:
        try:
            withdraw(c.get_model_version(name, version))
        except Exception as again:
            raise PublicationFailed(
                f"{ModelUri(name=name, version=version)} could not take its aliases ({exc}) nor be withdrawn ({again}); it is "
                f"tagged {PUBLICATION}=pending and the next run that judges {name} withdraws it"
            ) from exc
        raise
    log.info("%s version %s: %s%s", name, version, verdict, " -> champion" if make_champion else "")
    return Promotion(version=version, promoted=make_champion, verdict=verdict)


def withdraw(version) -> None:
    """Delete a half-published version, first giving each alias it took back to the version it replaced."""
    c = client()
    for which in ALIASES:
        current = alias(version.name, which)
        if current is not None and str(current.version) == str(version.version):
            replaced = registry_tags.replaced_version(version, which)
            if replaced:
                c.set_registered_model_alias(version.name, which, replaced)
            else:
                c.delete_registered_model_alias(version.name, which)
    c.delete_model_version(version.name, str(version.version))
    log.warning("%s was left half-published: withdrawn", ModelUri.of(version))


def recover(name: str) -> list[str]:
    """Withdraw the versions of `name` that a run left pending (it died, or its tracking server did, mid-way).
    Exact when called under the model's promotion lock, which every publication of the model holds."""
    c = client()
    left = [v for v in c.search_model_versions(f"name = '{name}'") if Publication.is_pending(v.tags)]
    for version in sorted(left, key=lambda v: -int(v.version)):  # newest first: aliases go back in order
        withdraw(version)
    return [str(v.version) for v in left]


def download(version, home: Path) -> Path:
    """A registered version's `artifacts/` folder (model.pt, tokenizer.json), fetched once per version into
    `$FOUNDRY_HOME/models/`: versions do not change, so retraining and the judge share one copy."""
    import os
    import tempfile

    import mlflow

    models = home / "models"
    folder = models / ModelUri.of(version).folder  # its name and version checked: one path component
    if not folder.is_dir():
        models.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=models))
        try:
            mlflow.artifacts.download_artifacts(version.source, dst_path=str(scratch))
            try:
                os.rename(scratch, folder)  # whole or not at all
            except OSError:
                if not folder.is_dir():  # not a lost race with another download of the same version
                    raise
        finally:
            remove_tree(scratch, within=models, ignore_errors=True)
    # MLflow puts the files in the folder itself or in a subfolder named after the model, by URI scheme.
    (model,) = [p for p in (folder, *folder.iterdir()) if (p / "artifacts" / "model.pt").is_file()]
    return model / "artifacts"


def resolve(model_uri: str | ModelUri):
    """`models:/name/version` or `models:/name@alias` to its model version; a malformed URI is a ValueError."""
    uri = model_uri if isinstance(model_uri, ModelUri) else ModelUri.parse(model_uri)
    c = client()
    if uri.alias is not None:
        return c.get_model_version_by_alias(uri.name, uri.alias)
    return c.get_model_version(uri.name, uri.version)


def promote_manually(model_uri: str, reason: str, who: str) -> dict:
    """A reviewer's decision: make this version champion, recording who, why and the one it replaced."""
    import datetime

    version = resolve(model_uri)
    refuse_purged(version, "promoted")
    previous = champion(version.name)
    c = client()
    c.set_registered_model_alias(version.name, "champion", str(version.version))
    record = PromotionTags(
        promoted_by=who,
        promotion_reason=reason,
        promoted_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        replaced_champion="" if previous is None else str(previous.version),
    ).as_tags()
    for key, value in record.items():
        c.set_model_version_tag(version.name, str(version.version), key, value)
    return {"name": version.name, "version": str(version.version), **record}


_NOT_COPIED = tag.EXPORT  # the tags `foundry export` sets (`version_tags.export`)


def reregister(model_uri: str, home: Path) -> str:
    """The weights and tokenizer of a version, registered again as a new version of the same model that
    carries its code (versions logged before the code moved carry none and load only in a checkout).
    The tags, model card and serving limits are copied (the default limits for a version logged before there
    were any), `reregistered_from` names the original; aliases stay put. Export tags are not copied: they name
    artifacts of the original's run (`foundry export` writes the new version's own when asked)."""
    from mlflow.models import Model
    from mlflow.models.model import MODEL_CONFIG

    from foundry.runtime import tracking
    from foundry.serving.package import log_model

    old = resolve(model_uri)
    artifacts = download(old, home)
    experiment = client().get_run(old.run_id).info.experiment_id
    run = client().create_run(
        experiment,
        run_name=f"reregister {old.name}/{old.version}",
        tags=RunTags(stage="reregister", reregistered_from=model_uri).as_tags(),
    )
    try:
        limits = Model.load(str(artifacts.parent)).flavors["python_function"].get(MODEL_CONFIG)
        uri = log_model(run.info.run_id, artifacts / "model.pt", artifacts / "tokenizer.json", limits)
        tags = {k: v for k, v in old.tags.items() if not k.startswith(_NOT_COPIED)}
        tags[tag.REREGISTERED_FROM] = str(ModelUri.of(old))
        version = register(uri, old.name, run.info.run_id, tags, description=old.description or "")
    except Exception:
        tracking.end_run(run.info.run_id, ok=False)
        raise
    tracking.end_run(run.info.run_id, ok=True)
    return version
