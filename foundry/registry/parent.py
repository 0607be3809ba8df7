"""The registered model a run starts from: its weights, tokenizer, recorded config and source manifest."""

from __future__ import annotations

import json
from pathlib import Path

from foundry.contracts import DataVersion, ParentModel, SourceManifest
from foundry.registry import versions


class NoChampion(RuntimeError):
    """Retraining starts from a champion; there is none yet."""


def fetch_champion(model_name: str, home: Path) -> ParentModel:
    """The champion of `model_name`, downloaded once per version into `$FOUNDRY_HOME/models/`."""
    import mlflow

    champion = versions.champion(model_name)
    if champion is None:
        raise NoChampion(f"{model_name} has no champion to retrain; run the train pipeline first")
    artifacts = versions.download(champion, home)
    manifest = mlflow.artifacts.load_text(f"runs:/{champion.run_id}/data/source_manifest.json")
    return ParentModel(
        uri=f"models:/{champion.name}/{champion.version}",
        weights=str(artifacts / "model.pt"),
        tokenizer=str(artifacts / "tokenizer.json"),
        config=json.loads(champion.tags["config"]),
        source_manifest=SourceManifest.model_validate_json(manifest),
    )


def fetch_version(model_uri: str, home: Path) -> ParentModel:
    """Any registered version (`models:/NAME/VERSION` or `models:/NAME@ALIAS`), downloaded once per version,
    with the pretraining data of the base it descends from (its own data for a pretrained model)."""
    import mlflow

    version = versions.resolve(model_uri)
    artifacts = versions.download(version, home)
    tags = version.tags
    run_id = tags.get("run_id", version.run_id)  # a re-registered version names its training run in its tags
    manifest = mlflow.artifacts.load_text(f"runs:/{run_id}/data/source_manifest.json")
    pretrain = tags.get("pretrain.data_version", tags.get("data_version"))
    remote = tags.get("pretrain.data.remote", tags.get("data.remote"))
    return ParentModel(
        uri=f"models:/{version.name}/{version.version}",
        weights=str(artifacts / "model.pt"),
        tokenizer=str(artifacts / "tokenizer.json"),
        config=json.loads(tags["config"]),
        source_manifest=SourceManifest.model_validate_json(manifest),
        pretrain_data=DataVersion(data_version=pretrain, remote=remote) if pretrain and remote else None,
    )
