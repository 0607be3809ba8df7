"""What a run builds on: the champion's data version (its split ledger and holdout) and, for a retrain, the
champion itself (weights, tokenizer, recorded config and source manifest)."""

from __future__ import annotations

from pathlib import Path

from foundry.core.contracts import DataVersion, ParentData, ParentModel, SourceManifest
from foundry.core.model_uri import ModelUri, RunsUri
from foundry.data.purged import followed
from foundry.registry import tags as registry_tags
from foundry.registry import versions
from foundry.registry.lineage import recorded_config, training_run_id


class NoChampion(RuntimeError):
    """Retraining starts from a champion; there is none yet."""


def data_of(champion, home: Path) -> ParentData:
    """A registered version's data version, hydrated on this node (once per version); the version a purge
    replaced it with when a purge removed it (`DataPurged` naming the record when nothing replaced it)."""
    from foundry.data.hydrate import hydrate_version
    from foundry.data.ledger import identity
    from foundry.registry.gate import champion_data

    data = followed(champion_data(champion), home)
    folder = hydrate_version(data, home)
    return ParentData(model_uri=str(ModelUri.of(champion)), data=data, dir=folder, ledger_digest=identity(folder))


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
    data = data_of(champion, home)  # first: its tags are checked before anything is written for it
    return _downloaded(champion, champion.run_id, home).model_copy(update={"data": data})


def fetch_version(model_uri: str, home: Path) -> ParentModel:
    """Any registered version (`models:/NAME/VERSION` or `models:/NAME@ALIAS`), downloaded once per version,
    with the pretraining data of the base it descends from (its own data for a pretrained model)."""
    version = versions.resolve(model_uri)
    pretrain = pretrain_data(version)  # first: its tags are checked before anything is written for it
    pretrain = None if pretrain is None else followed(pretrain, home)  # a purge's replacement, if any
    # a re-registered version names its training run in its tags
    return _downloaded(version, training_run_id(version), home).model_copy(update={"pretrain_data": pretrain})


def _downloaded(version, run_id: str, home: Path) -> ParentModel:
    """A version's files, downloaded once, with the config and source manifest its training run recorded."""
    import mlflow

    artifacts = versions.download(version, home)
    manifest = mlflow.artifacts.load_text(str(RunsUri(run_id=run_id, path="data/source_manifest.json")))
    return ParentModel(
        uri=str(ModelUri.of(version)),
        weights=str(artifacts / "model.pt"),
        tokenizer=str(artifacts / "tokenizer.json"),
        config=recorded_config(version),
        source_manifest=SourceManifest.model_validate_json(manifest),
    )


def pretrain_data(version) -> DataVersion | None:
    """The data the base a version descends from was pretrained on: its `pretrain.*` tags for an aligned
    version, its own data tags otherwise; None when it records none. A tag that is not a data version stops
    the run (`tags.BadTag`), never a fallback."""
    return registry_tags.recorded_data(version, pretrain=bool(registry_tags.read(version).pretrain_data_version))
