"""The registry's side of a purge: which data versions the registered versions and runs name, and which
registered versions are affected: trained, fine-tuned, merged or aligned on an affected data version (any tag
`*data_version`: `data_version`, `pretrain.data_version`…), or built from an affected parent (`parent_model`,
followed to every descendant). Read with gc's readers; any error reading the registry or the runs is
`RegistryUnreadable` (fail closed: a purge that cannot see every version finds nothing rather than too little).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from foundry.core.contracts import check_data_version
from foundry.core.model_uri import ModelUri
from foundry.core.version_tags import VersionTags
from foundry.gc.refs import RegistryUnreadable, data_tags, experiment_runs, registered_versions
from foundry.purge.plan import ModelHit
from foundry.registry import tags as registry_tags


@dataclass
class Registry:
    """What the registry and the tracking store say about data, read once."""

    versions: list = field(default_factory=list)  # MLflow ModelVersions
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)  # model URI -> its aliases, sorted
    data: dict[str, set[str]] = field(default_factory=dict)  # model URI -> the data versions its tags name
    parents: dict[str, list[str]] = field(default_factory=dict)  # model URI -> its parents' pinned URIs
    remotes: set[str] = field(default_factory=set)  # every `*data.remote` a version or run names
    runs: dict[str, set[str]] = field(default_factory=dict)  # run id -> the data versions its tags name
    # experiment id -> (name, artifact location), for each experiment with runs: where their artifacts are kept
    experiments: dict[str, tuple[str, str]] = field(default_factory=dict)

    def named(self) -> dict[str, str]:
        """Every data version the registry or a run names -> who names it first."""
        found: dict[str, str] = {}
        for model, versions in sorted(self.data.items()):
            for version in versions:
                found.setdefault(version, f"named by {model}")
        for run_id, versions in sorted(self.runs.items()):
            for version in versions:
                found.setdefault(version, f"named by run {run_id}")
        return found


def read(client) -> Registry:
    try:
        return _read(client)
    except Exception as exc:
        raise RegistryUnreadable(
            f"cannot read the model registry and the runs completely ({type(exc).__name__}: {exc}); purge "
            "refuses: a model trained on the documents might be missed"
        ) from exc


def _read(client) -> Registry:
    found = Registry(versions=registered_versions(client), aliases=_aliases(client))
    aliases = {
        (pinned.name, a): pinned.version
        for uri, names in found.aliases.items()
        for pinned in [ModelUri.parse(uri)]
        for a in names
    }
    for version in found.versions:
        uri = str(ModelUri.of(version))
        found.data[uri] = {_checked(uri, value) for value in data_tags(version.tags)}
        found.parents[uri] = [
            pinned
            for parent in registry_tags.parent_models(version)
            for pinned in _pinned(client, parent, aliases, found.versions)
        ]
        found.remotes |= VersionTags.remotes_named(version.tags)
    for experiment in _experiments(client):
        runs = experiment_runs(client, experiment.experiment_id)
        if runs:
            found.experiments[experiment.experiment_id] = (experiment.name, experiment.artifact_location or "")
        for run in runs:
            tags = run.data.tags
            named = {v for v in data_tags(tags) if _looks_like_version(v)}
            if named:
                found.runs[run.info.run_id] = named
            found.remotes |= VersionTags.remotes_named(tags)
    return found


def _checked(uri: str, value: str) -> str:
    try:
        return check_data_version(value)
    except ValueError:
        raise registry_tags.BadTag(f"{uri} names data version {value!r}, not 32 hex digits") from None


def _looks_like_version(value: str) -> bool:
    try:
        check_data_version(value)
        return True
    except ValueError:
        return False


def _pinned(client, parent: ModelUri, aliases: dict[tuple[str, str], str], versions: list) -> list[str]:
    """The pinned URIs a parent tag may mean: itself, the version its alias names, or, when that alias is gone
    (a purge took `champion` away), every version of that name: a purge must not miss a descendant."""
    if parent.alias is None:
        return [str(parent)]
    version = aliases.get((parent.name, parent.alias))
    if version is None:
        from mlflow.exceptions import MlflowException

        from foundry.registry.versions import absent

        try:
            version = str(client.get_model_version_by_alias(parent.name, parent.alias).version)
        except MlflowException as exc:
            if not absent(exc):
                raise
            return [str(ModelUri.of(v)) for v in versions if v.name == parent.name]
    return [str(ModelUri(name=parent.name, version=version))]


def _aliases(client) -> dict[str, tuple[str, ...]]:
    """Each version's aliases, from the registered models: a version found by `search_model_versions` carries
    none (MLflow's SQL store leaves them out)."""
    found: dict[str, list[str]] = {}
    token = None
    while True:
        page = client.search_registered_models(max_results=1000, page_token=token)
        for model in page:
            for alias, version in (model.aliases or {}).items():
                found.setdefault(str(ModelUri(name=model.name, version=str(version))), []).append(alias)
        token = page.token
        if not token:
            return {uri: tuple(sorted(names)) for uri, names in found.items()}


def _experiments(client) -> list:
    found, token = [], None
    while True:
        page = client.search_experiments(max_results=1000, page_token=token)
        found += list(page)
        token = page.token
        if not token:
            return found


def affected_models(registry: Registry, affected_data: set[str]) -> list[ModelHit]:
    """Registered versions trained on affected data, then, until nothing changes, every version built from one
    of them (a fine-tune's child, a merge holding it, an alignment of it)."""
    why: dict[str, str] = {}
    for uri, versions in registry.data.items():
        if hit := sorted(versions & affected_data):
            why[uri] = f"trained on data version {hit[0]}" + (f" and {len(hit) - 1} more" if len(hit) > 1 else "")
    changed = True
    while changed:
        changed = False
        for uri, parents in registry.parents.items():
            if uri not in why and (parent := next((p for p in parents if p in why), None)):
                why[uri] = f"built from {parent}"
                changed = True
    aliases = registry.aliases
    records = {str(ModelUri.of(v)): VersionTags.purge_of(v.tags) for v in registry.versions}
    return [
        ModelHit(model=uri, aliases=aliases.get(uri, ()), why=why[uri], purge_record=records.get(uri))
        for uri in sorted(why, key=order)
    ]


def order(uri: str) -> tuple[str, int]:
    pinned = ModelUri.parse(uri)
    return pinned.name, int(pinned.version or 0)


def affected_runs(registry: Registry, affected_data: set[str]) -> list[str]:
    return sorted(run_id for run_id, versions in registry.runs.items() if versions & affected_data)


def evaluated_runs(registry: Registry, data_versions: set[str]) -> set[str]:
    """The runs trained or evaluated on any of `data_versions`: those whose tags name one, and the runs of the
    registered versions whose tags do (a version's run may carry no data tag of its own)."""
    runs = {run_id for run_id, versions in registry.runs.items() if versions & data_versions}
    for version in registry.versions:
        if version.run_id and registry.data.get(str(ModelUri.of(version)), set()) & data_versions:
            runs.add(version.run_id)
    return runs
