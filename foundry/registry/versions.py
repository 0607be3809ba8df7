"""Stage E, the registry: a model version per pipeline run, `challenger` always, `champion` only
through the gate (`foundry.registry.gate`) or a reviewer (`promote_manually`).

Registration is all or nothing: a version is created with its tags in one call, so a failed run never
leaves a half-registered model behind.
"""

from __future__ import annotations

import logging
from pathlib import Path

from foundry.contracts import Promotion
from foundry.tracking import client

log = logging.getLogger(__name__)


def register(model_uri: str, name: str, run_id: str, tags: dict[str, str], description: str = "") -> str:
    """A new version of `name` carrying `tags`; returns the version number."""
    c = client()
    try:
        c.get_registered_model(name)
    except Exception:
        c.create_registered_model(name, description="GPT-style language models trained by Foundry.")
    # A tracking server insists on the logged model's id beside its models:/m-... source.
    model_id = model_uri.removeprefix("models:/") if model_uri.startswith("models:/m-") else None
    # Tags in the same call: the registry checks them before it creates the version, so a bad tag leaves none.
    version = c.create_model_version(
        name,
        source=model_uri,
        run_id=run_id,
        tags={key: str(value) for key, value in tags.items()},
        description=description,
        model_id=model_id,
    )
    return str(version.version)


def champion(name: str):
    """The current champion's model version, or None."""
    try:
        return client().get_model_version_by_alias(name, "champion")
    except Exception:
        return None


def download(version, home: Path) -> Path:
    """A registered version's `artifacts/` folder (model.pt, tokenizer.json), fetched once per version into
    `$FOUNDRY_HOME/models/`: versions do not change, so retraining and the judge share one copy."""
    import os
    import shutil
    import tempfile

    import mlflow

    folder = home / "models" / f"{version.name}-v{version.version}"
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            mlflow.artifacts.download_artifacts(version.source, dst_path=str(scratch))
            try:
                os.rename(scratch, folder)  # whole or not at all
            except OSError:
                if not folder.is_dir():  # not a lost race with another download of the same version
                    raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    # MLflow puts the files in the folder itself or in a subfolder named after the model, by URI scheme.
    (model,) = [p for p in (folder, *folder.iterdir()) if (p / "artifacts" / "model.pt").is_file()]
    return model / "artifacts"


def promote(name: str, version: str, make_champion: bool, verdict: str) -> Promotion:
    """Set `challenger`, and `champion` when asked; the outcome is tagged on the version."""
    c = client()
    c.set_registered_model_alias(name, "challenger", version)
    if make_champion:
        c.set_registered_model_alias(name, "champion", version)
    c.set_model_version_tag(name, version, "gate.promoted", str(make_champion).lower())
    log.info("%s version %s: %s%s", name, version, verdict, " -> champion" if make_champion else "")
    return Promotion(promoted=make_champion, verdict=verdict)


def resolve(model_uri: str):
    """`models:/name/version` or `models:/name@alias` to its model version."""
    if not model_uri.startswith("models:/"):
        raise ValueError(f"{model_uri!r} is not a model URI; use models:/NAME/VERSION or models:/NAME@ALIAS")
    rest = model_uri.removeprefix("models:/")
    c = client()
    if "@" in rest:
        name, alias = rest.split("@", 1)
        return c.get_model_version_by_alias(name, alias)
    name, _, version = rest.partition("/")
    if not version.isdigit():
        raise ValueError(f"{model_uri!r} names no version; use models:/NAME/VERSION or models:/NAME@ALIAS")
    return c.get_model_version(name, version)


def promote_manually(model_uri: str, reason: str, who: str) -> dict:
    """A reviewer's decision: make this version champion, recording who, why and the one it replaced."""
    import datetime

    version = resolve(model_uri)
    previous = champion(version.name)
    c = client()
    c.set_registered_model_alias(version.name, "champion", str(version.version))
    record = {
        "promoted_by": who,
        "promotion_reason": reason,
        "gate.promoted": "true",
        "promoted_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "replaced_champion": "" if previous is None else str(previous.version),
    }
    for key, value in record.items():
        c.set_model_version_tag(version.name, str(version.version), key, value)
    return {"name": version.name, "version": str(version.version), **record}


def reregister(model_uri: str, home: Path) -> str:
    """The weights and tokenizer of a version, registered again as a new version of the same model that
    carries its code (versions logged before the code moved carry none and load only in a checkout).
    The tags and model card are copied, `reregistered_from` names the original; aliases stay put."""
    from foundry import tracking
    from foundry.serving.package import log_model

    old = resolve(model_uri)
    artifacts = download(old, home)
    experiment = client().get_run(old.run_id).info.experiment_id
    run = client().create_run(
        experiment,
        run_name=f"reregister {old.name}/{old.version}",
        tags={"foundry.stage": "reregister", "reregistered_from": model_uri},
    )
    try:
        uri = log_model(run.info.run_id, artifacts / "model.pt", artifacts / "tokenizer.json")
        tags = {**old.tags, "reregistered_from": f"models:/{old.name}/{old.version}"}
        version = register(uri, old.name, run.info.run_id, tags, description=old.description or "")
    except Exception:
        tracking.end_run(run.info.run_id, ok=False)
        raise
    tracking.end_run(run.info.run_id, ok=True)
    return version
