"""Lineage: from a registered model back to its run, data version, source, code and config."""

from __future__ import annotations

import json
from pathlib import Path

from foundry.config import FoundryConfig, as_recorded
from foundry.core.contracts import DataVersion, FetchedFile, LineageRecord
from foundry.core.metrics.aligned import AlignmentMetrics
from foundry.core.metrics.holdout import PREFIX as HOLDOUT_PREFIX
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.core.model_uri import ModelUri, RunsUri
from foundry.core.run_tags import PACKAGE_VERSION, RunTags
from foundry.core.version_tags import GIT_COMMIT, GIT_DIRTY, VersionTags
from foundry.data.purged import DataPurged, mark_of
from foundry.gates.decision import Decision
from foundry.registry import tags as registry_tags
from foundry.registry import versions as registry
from foundry.runtime import tracking
from foundry.runtime.cpu_features import DEVICE_PRECISIONS
from foundry.runtime.env import foundry_home

ALIGNED_PREFIX = AlignmentMetrics.PREFIXES["aligned"] + "/"  # an aligned model's own scores: `align/<measure>`


def version_tags(
    config: FoundryConfig,
    run_id: str,
    data: DataVersion,
    source_digest: str,
    decision: Decision,
    git: dict[str, str],
    parent: str = "",
) -> VersionTags:
    """The tags a model version carries, the few a reviewer reads in the registry's list: lineage (the
    training run, data version and source, commit, parent) and the gate's record. Metrics stay metrics (on
    the run and its logged model), the config stays the run's params and `config.json`."""
    return VersionTags(
        run_id=run_id,
        data_version=data.data_version,
        data_remote=data.remote,
        data_source=config.data.source,
        source_digest=source_digest,
        git_commit=git.get(GIT_COMMIT),
        git_dirty=git.get(GIT_DIRTY),
        gate=decision.tags(),
        parent_model=parent,
    )


def training_run_id(version) -> str:
    """The run that trained a version (checked: `tags.run_id`)."""
    return registry_tags.run_id(version)


def training_data(version, home: Path | None = None) -> DataVersion:
    """The data version a registered version was trained on, from its tags (checked: `tags.data_version`).
    `DataPurged` naming the purge record when a purge removed it from `home` (default `$FOUNDRY_HOME`): that
    training cannot be repeated, even where its replacement exists."""
    try:
        data = registry_tags.data_version(version)
    except KeyError as missing:
        raise registry_tags.BadTag(
            f"{ModelUri.of(version)} records no {missing} tag: the data it was trained on is unknown"
        ) from None
    if (purge := mark_of(home or foundry_home(), data.data_version)) is not None:
        raise DataPurged(f"{ModelUri.of(version)} cannot be reproduced: {purge.refusal()}")
    return data


def aligned(version) -> bool:
    """Whether a version was made by `foundry align` (its `align.method` tag): its held-out scores are the
    alignment's (`align/<measure>` on its training run), not a pretraining holdout's."""
    return bool(registry_tags.read(version).align_method)


def recorded_aligned(version) -> dict[str, float]:
    """An aligned version's own held-out scores as its training run logged them (`align/<measure>`)."""
    metrics = tracking.client().get_run(training_run_id(version)).data.metrics
    return {k: v for k, v in metrics.items() if k.startswith(ALIGNED_PREFIX)}


def pretraining_data(version) -> DataVersion | None:
    """The pretraining data an aligned version's base was trained on (its `pretrain.*` tags, checked), on whose
    holdout its forgetting was measured; None when it records none."""
    return registry_tags.recorded_data(version, pretrain=True)


def replayed_data(
    version, config: FoundryConfig, run_tags: dict[str, str], home: Path | None = None
) -> DataVersion | None:
    """The pretraining data an aligned version replayed windows of (`align.replay_fraction` > 0 in its recorded
    `config`): its `pretrain.data_version` and `pretrain.data.remote` tags, checked against its training run's
    `align.replay_source` tag (`run_tags`), which names what the run replayed. None when it replayed nothing (no
    alignment, or a fraction of 0). `BadTag` naming the tag a version does not record (versions tagged by hand,
    runs from when the replayed data was a path in the config): without it the replay cannot be rebuilt;
    `DataPurged` when a purge removed that data from `home` (default `$FOUNDRY_HOME`), as for `training_data`."""
    if not aligned(version) or config.align.replay_fraction == 0:
        return None
    uri, why = ModelUri.of(version), f"align.replay_fraction {config.align.replay_fraction}"
    try:
        data = registry_tags.data_version(version, pretrain=True)
    except KeyError as missing:
        raise registry_tags.BadTag(
            f"{uri} was aligned with {why} but records no {missing} tag: the pretraining data it replayed is "
            "unknown, so its replay cannot be rebuilt (tag the version with its base's data version and remote, "
            "as an alignment records them, if you know them)"
        ) from None
    replayed = RunTags.replay_source_of(run_tags)
    if replayed.value is None:
        raise registry_tags.BadTag(
            f"{uri} was aligned with {why} but its training run records no {replayed.key!r} tag (a run from when "
            "the replayed data was a path in the config): what it replayed is unknown, so its replay cannot be rebuilt"
        )
    if replayed.value != data.data_version:
        key = VersionTags.data_tags(version.tags, pretrain_data=True)[0].key
        raise registry_tags.BadTag(
            f"{uri} tag {key}={data.data_version} is not the data its training run replayed "
            f"({replayed.key}={replayed.value}): refusing to replay either (fix the tag in the registry)"
        )
    if (purge := mark_of(home or foundry_home(), data.data_version)) is not None:
        raise DataPurged(f"{uri} cannot be reproduced: the pretraining data it replayed is purged: {purge.refusal()}")
    return data


def recorded_metrics(version) -> dict[str, float]:
    """A version's holdout metrics under their MLflow keys: its tags for versions registered when metrics were
    copied there, else its training run's metrics."""
    legacy = {k: float(v) for k, v in version.tags.items() if k.startswith(HOLDOUT_PREFIX)}
    if legacy:
        return legacy
    metrics = tracking.client().get_run(training_run_id(version)).data.metrics
    return {k: v for k, v in metrics.items() if k.startswith(HOLDOUT_PREFIX)}


def recorded_holdout(version) -> HoldoutMetrics | None:
    """`recorded_metrics` as a value; None when the version recorded no holdout bits per byte."""
    recorded = recorded_metrics(version)
    return HoldoutMetrics.from_mlflow(recorded) if HoldoutMetrics.recorded_in(recorded) else None


def recorded_config(version) -> dict:
    """The config that trained a version: its `config` tag for versions registered when the config was one,
    else its training run's `config.json`; {} when the run recorded none (errors reading it propagate). Keys the
    record predates get the values it trained with (`foundry.config.as_recorded`)."""
    if (recorded := VersionTags.config_of(version.tags)) is not None:
        return as_recorded(json.loads(recorded))
    import mlflow

    run_id = training_run_id(version)
    if "config.json" not in {a.path for a in tracking.client().list_artifacts(run_id)}:
        return {}
    recorded = mlflow.artifacts.load_text(str(RunsUri(run_id=run_id, path="config.json")))
    return as_recorded(json.loads(recorded))


def as_trained(config: dict, run_tags: dict[str, str]) -> dict:
    """A recorded config with a `train.precision` that resolves by the machine replaced by what it resolved to on
    the machine that trained (the run's tag; runs from before the tag keep theirs), and `train.compile` off where
    it trained uncompiled for want of a compiler: a reproduction elsewhere then computes as it did."""
    resolved = RunTags.resolved_precision_of(run_tags)
    train = dict(config.get("train", {}))
    if resolved and train.get("precision") in DEVICE_PRECISIONS:
        train["precision"] = resolved
    if RunTags.trained_uncompiled(run_tags):  # no compiler where it trained: Inductor's rounding was not used
        train["compile"] = False
    return {**config, "train": train} if train != config.get("train", {}) else config


def lineage(model_uri: str, depth: int = 10) -> list[LineageRecord]:
    """The model version's record, then its parents' (the one it was fine-tuned from, or those it merges), and so on."""
    version = registry.resolve(model_uri)
    tags = registry_tags.read(version)
    parents = registry_tags.parent_models(version)  # checked before they are followed
    run = tracking.client().get_run(version.run_id)
    record = LineageRecord(
        model=str(ModelUri.of(version)),
        aliases=list(version.aliases or []),
        run_id=version.run_id,
        run_status=run.info.status,
        data_version=tags.data_version,
        data_remote=tags.data_remote,
        data_source=tags.data_source,
        data_source_digest=tags.source_digest or "",
        git_commit=tags.git_commit or "",  # the version's own tags: the commit of the code that trained it
        git_dirty=tags.git_dirty or "",
        parent_model=tags.parent_model,
        packages={
            k.removeprefix(PACKAGE_VERSION): v for k, v in run.data.tags.items() if k.startswith(PACKAGE_VERSION)
        },
        config=recorded_config(version),
        holdout_bits_per_byte=_formatted(getattr(recorded_holdout(version), "bits_per_byte", None)),
        remote_files=remote_files(version.run_id),
        merge_recipe=tags.merge_recipe,
    )
    chain = [record]
    if depth > 1:  # a merge has several parents (comma-separated); an ancestor they share is listed once
        for parent in parents:
            chain += [r for r in lineage(str(parent), depth - 1) if r.model not in {c.model for c in chain}]
    return chain


def _formatted(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def remote_files(run_id: str) -> list[FetchedFile]:
    """What the origin of each remote source file said when the run acquired it (URL or s3 URI, ETag,
    Last-Modified, when it was asked), from the run's source manifest; [] for runs that logged none."""
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        uri = RunsUri(run_id=run_id, path="data/source_manifest.json")
        manifest = json.loads(mlflow.artifacts.load_text(str(uri)))
    except (MlflowException, OSError):
        return []
    keys = FetchedFile.model_fields
    return [FetchedFile(**{k: e.get(k, "") for k in keys}) for e in manifest.get("entries", []) if e.get("origin")]


def _depths(chain: list[LineageRecord]) -> dict[str, int]:
    """How far each record is from the first: a merge's parents sit side by side, their shared base below."""
    depth = {chain[0].model: 0} if chain else {}
    for r in chain:  # `lineage` lists a record before its parents
        for parent in filter(None, (uri.strip() for uri in r.parent_model.split(","))):
            depth.setdefault(parent, depth[r.model] + 1)
    return depth


def _made_by(r: LineageRecord) -> list[str]:
    """Where the weights came from: the commit that trained them and its config, or a merge's recipe."""
    code = f"code     commit {r.git_commit or 'unknown'}{' (dirty)' if r.git_dirty == 'true' else ''}"
    packages = f"packages {', '.join(f'{k} {v}' for k, v in sorted(r.packages.items()))}"
    if r.merge_recipe:
        return [code, packages, f"recipe   {r.merge_recipe} (merged, not trained)"]
    train, model = r.config.get("train", {}), json.dumps(r.config.get("model", {}))
    return [code, packages, f"config   train.max_steps={train.get('max_steps')} model={model}"]


def format_lineage(chain: list[LineageRecord]) -> str:
    lines, depths = [], _depths(chain)
    for r in chain:
        indent = "  " * depths.get(r.model, 0)
        digest = f" (content digest {r.data_source_digest[:16]})" if r.data_source_digest else ""
        aliases = f" @{', @'.join(r.aliases)}" if r.aliases else ""
        lines += [
            f"{indent}{r.model}{aliases}  holdout {r.holdout_bits_per_byte or '?'} bits/byte",
            f"{indent}  run      {r.run_id} ({r.run_status})",
            f"{indent}  data     version {r.data_version} in {r.data_remote}",
            f"{indent}  source   {r.data_source}{digest}",
            *(
                f"{indent}  fetched  {f.origin} etag {f.etag or '-'} modified {f.last_modified or '-'} "
                f"checked {f.checked_at}"
                for f in r.remote_files
            ),
            *(f"{indent}  {line}" for line in _made_by(r)),
            f"{indent}  parent   {r.parent_model or 'none (trained from scratch)'}",
        ]
    return "\n".join(lines)


class CommitMismatch(RuntimeError):
    """The code differs from the code that trained the model."""


def check_commit(record: LineageRecord, current: dict[str, str], force: bool) -> None:
    """Reproduction is exact only with the code that trained the model: the same commit, and neither
    that run's tree nor this one holding changes a commit does not name. Otherwise it needs `force`.
    `current` is `tracking.git_state()`."""
    if force:
        return
    model, recorded = record.model, record.git_commit
    if recorded != current[GIT_COMMIT]:
        raise CommitMismatch(
            f"{model} was trained at commit {recorded}, this code is at {current[GIT_COMMIT]}: "
            f"check out {recorded} to reproduce it exactly, or pass --force to re-train anyway"
        )
    if record.git_dirty != "false":
        raise CommitMismatch(
            f"{model} was trained from a tree with uncommitted changes (git_dirty={record.git_dirty or 'unknown'}) "
            f"on top of {recorded}: the code that trained it is not known exactly; pass --force to re-train anyway"
        )
    if current[GIT_DIRTY] != "false":
        raise CommitMismatch(
            f"this checkout has uncommitted changes or untracked files under the code paths "
            f"(git status -- foundry flows tasks models dvc.yaml pyproject.toml): commit or stash them to "
            f"reproduce {model} exactly, or pass --force to re-train anyway"
        )


def compare(recorded: HoldoutMetrics | None, reproduced: HoldoutMetrics) -> dict[str, tuple[float, float]]:
    """(recorded, reproduced) for each of the model's own holdout figures the version recorded
    (`recorded_holdout`), by MLflow key, to the 6 decimals that versions registered with metric tags kept."""
    return compare_scores(recorded.compared() if recorded is not None else {}, reproduced.compared())


def compare_scores(recorded: dict[str, float], reproduced: dict[str, float]) -> dict[str, tuple[float, float]]:
    """(recorded, reproduced) for each MLflow key both hold, to 6 decimals."""
    return {key: (round(value, 6), round(reproduced[key], 6)) for key, value in recorded.items() if key in reproduced}


def identical(comparison: dict[str, tuple[float, float]]) -> bool:
    """Every score both runs hold agrees; nothing to compare is not a match (a check that cannot fail proves nothing)."""
    return bool(comparison) and all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in comparison.values())
