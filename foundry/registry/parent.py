"""The registered model a run starts from: its weights, tokenizer, recorded config and source manifest."""

from __future__ import annotations

from pathlib import Path

from foundry.contracts import ParentModel, SourceManifest
from foundry.registry import versions
from foundry.registry.lineage import recorded_config


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
        config=recorded_config(champion),
        source_manifest=SourceManifest.model_validate_json(manifest),
    )
