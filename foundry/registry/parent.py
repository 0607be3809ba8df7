"""What a run builds on: the champion's data version (its split ledger and holdout) and, for a retrain, the
champion itself (weights, tokenizer, recorded config and source manifest)."""

from __future__ import annotations

import json
from pathlib import Path

from foundry.contracts import ParentData, ParentModel, SourceManifest
from foundry.registry import versions


class NoChampion(RuntimeError):
    """Retraining starts from a champion; there is none yet."""


def data_of(champion, home: Path) -> ParentData:
    """A registered version's data version, hydrated on this node (once per version)."""
    from foundry.data.hydrate import hydrate_version
    from foundry.data.ledger import identity
    from foundry.registry.gate import champion_data

    data = champion_data(champion)
    folder = hydrate_version(data, home)
    return ParentData(
        model_uri=f"models:/{champion.name}/{champion.version}", data=data, dir=folder, ledger_digest=identity(folder)
    )


def champion_data(model_name: str, home: Path) -> ParentData | None:
    """The champion's data version, the ledger a new data version for this model builds on; None without a
    champion. A registry error is an error, not "no champion"."""
    champion = versions.champion(model_name)
    return None if champion is None else data_of(champion, home)


def fetch_champion(model_name: str, home: Path) -> ParentModel:
    """The champion of `model_name`, downloaded once per version into `$FOUNDRY_HOME/models/`, with its data."""
    champion = versions.champion(model_name)
    if champion is None:
        raise NoChampion(f"{model_name} has no champion to retrain; run the train pipeline first")
    return parent_model(champion, home)


def fetch_version(model_uri: str, home: Path) -> ParentModel:
    """Any registered version (models:/NAME/VERSION or models:/NAME@ALIAS) to start from, as `fetch_champion`."""
    return parent_model(versions.resolve(model_uri), home)


def parent_model(version, home: Path) -> ParentModel:
    """A registered version's weights, tokenizer, config, source manifest and hydrated data."""
    import mlflow

    artifacts = versions.download(version, home)
    manifest = mlflow.artifacts.load_text(f"runs:/{version.run_id}/data/source_manifest.json")
    return ParentModel(
        uri=f"models:/{version.name}/{version.version}",
        weights=str(artifacts / "model.pt"),
        tokenizer=str(artifacts / "tokenizer.json"),
        config=json.loads(version.tags["config"]),
        source_manifest=SourceManifest.model_validate_json(manifest),
        data=data_of(version, home),
    )
