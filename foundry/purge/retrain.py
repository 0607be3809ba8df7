"""`foundry purge --apply --retrain`: what to train again after a purge, one job per affected registered name, and
what is left to rebuild by hand.

A name is retrained when one of its versions was trained from scratch on a data version the purge rewrote: the
newest such version's recorded config trains again on the replacement, through the same gate and registration as
any run. A version built from another (`parent_model`: a fine-tune, a merge, an alignment, a scheduled retrain
of its own name) is never retrained here: its recipe is its command's (`foundry finetune`, `merge`, `align`,
`retrain`), and its recorded config would start from the purged parent's weights. It is a `Rebuild`, listed parents first with the command that rebuilds it on the
retrained parent (`commands`); `foundry purge` exits `REBUILDS_LEFT` while any is left.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from foundry.core.contracts import DataVersion
from foundry.core.model_uri import ModelUri
from foundry.core.version_tags import VersionTags
from foundry.purge.record import PurgeRecord

REBUILDS_LEFT = 3  # `foundry purge --apply --retrain`'s exit status while derived versions wait to be rebuilt
CONFIG_LEGEND = (
    "CONFIG: the version's own recorded config (`foundry lineage MODEL_URI --json`, its `config`) saved as YAML; "
    "each command starts from the retrained parent and registers under the version's own name"
)


class RetrainJob(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    trained: str  # the newest affected version of the name trained on the purged data: its config is reused
    data: DataVersion  # the replacement of that version's data


class Rebuild(BaseModel):
    """An affected version built from another, the newest of its name: rebuilt by hand, by its own command."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str  # models:/NAME/VERSION
    kind: Literal["finetune", "merge", "align", "retrain"]
    parents: tuple[str, ...]  # its `parent_model` tag, as written (a pinned version or an alias)
    base: str = ""  # a merge's base (`merge.base` tag)

    @property
    def name(self) -> str:
        return ModelUri.parse(self.model).name


class RetrainPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    jobs: tuple[RetrainJob, ...]
    rebuilds: tuple[Rebuild, ...] = ()  # parents before the versions built from them
    not_retrained: tuple[str, ...]  # affected versions no job or rebuild covers, each with why


def plan(record: PurgeRecord, client) -> RetrainPlan:
    from foundry.registry import tags

    newest: dict[str, RetrainJob] = {}
    rebuilds: dict[str, Rebuild] = {}
    why_not: dict[str, str] = {}
    for uri in record.models:
        model = ModelUri.parse(uri)
        version = client.get_model_version(model.name, model.version)
        if parents := tags.parent_models(version):
            rebuild = _rebuild(uri, parents, tags.read(version))
            current = rebuilds.get(model.name)
            if current is None or _number(uri) > _number(current.model):
                rebuilds[model.name] = rebuild
            continue
        data = tags.recorded_data(version)
        new = record.replaced.get(data.data_version) if data is not None else None
        if new is None:
            why_not[uri] = "its data was deleted, not rewritten" if data is not None else "no data version recorded"
            continue
        job = RetrainJob(name=model.name, trained=uri, data=DataVersion(data_version=new, remote=data.remote))
        current = newest.get(model.name)
        if current is None or _number(uri) > _number(current.trained):
            newest[model.name] = job
    covered = {job.trained for job in newest.values()} | {r.model for r in rebuilds.values()}
    for uri in record.models:
        if uri not in covered and uri not in why_not:
            done = "rebuilt" if ModelUri.parse(uri).name in rebuilds else "retrained"
            why_not[uri] = f"a newer version of its name is {done}"
    return RetrainPlan(
        jobs=tuple(sorted(newest.values(), key=lambda j: j.name)),
        rebuilds=_parents_first(list(rebuilds.values())),
        not_retrained=tuple(f"{uri}: {why_not[uri]}" for uri in record.models if uri in why_not),
    )


def _number(uri: str) -> int:
    return int(ModelUri.parse(uri).version or 0)


def _rebuild(uri: str, parents: list[ModelUri], tagged: VersionTags) -> Rebuild:
    kind = "align" if tagged.align_method else "merge" if tagged.merge_base or len(parents) > 1 else "finetune"
    if kind == "finetune" and parents[0].name == ModelUri.parse(uri).name:
        kind = "retrain"  # `foundry retrain`: the name's champion warm-started on what is new in its source
    return Rebuild(model=uri, kind=kind, parents=tuple(str(p) for p in parents), base=tagged.merge_base)


def _parents_first(rebuilds: list[Rebuild]) -> tuple[Rebuild, ...]:
    """Each rebuild after those of the names it is built from (by name, sorted within a rank)."""
    names = {r.name for r in rebuilds}
    ordered: list[Rebuild] = []
    left = sorted(rebuilds, key=lambda r: r.name)
    while left:
        done = {r.name for r in ordered}
        ready = [r for r in left if all(n in done or n == r.name for n in _names(r) & names)] or left[:1]
        ordered += ready
        left = [r for r in left if r not in ready]
    return tuple(ordered)


def _names(rebuild: Rebuild) -> set[str]:
    return {ModelUri.parse(uri).name for uri in (*rebuild.parents, *([rebuild.base] if rebuild.base else []))}


def commands(jobs: RetrainPlan, record: PurgeRecord, retrained: dict[str, str]) -> list[str]:
    """One line per rebuild, in order: the version, what it is built from, and the command that rebuilds it on
    the retrained parent (`retrained`: name -> the version `--retrain` registered). A parent the purge did not
    affect stays as it is; one rebuilt by an earlier line, or left without a retrained version, is a placeholder."""
    affected = {ModelUri.parse(uri).name for uri in record.models}
    rebuilt = {r.name for r in jobs.rebuilds}

    def now(parent: str) -> str:
        pinned = ModelUri.parse(parent)
        if pinned.name not in affected or (pinned.version is not None and parent not in record.models):
            return parent  # not affected: the same version
        if pinned.name in retrained:
            return retrained[pinned.name]
        return f"<{pinned.name} rebuilt above>" if pinned.name in rebuilt else f"<a new version of {pinned.name}>"

    lines = []
    for r in jobs.rebuilds:
        inputs = " ".join(now(p) for p in r.parents)
        base = f" --base {now(r.base)}" if r.kind == "merge" and r.base else ""
        what = {"finetune": "a fine-tune", "merge": "a merge", "align": "an alignment", "retrain": "a retrain"}[r.kind]
        if r.kind == "retrain":  # it starts from the name's champion: the retrained version, once promoted
            command = f"foundry retrain --config CONFIG --set registry.model_name={r.name}"
        else:
            command = f"foundry {r.kind} {inputs}{base} --config CONFIG --set {r.kind}.model_name={r.name}"
        lines.append(f"{r.model} ({what} of {', '.join(r.parents)}): {command}")
    return lines
