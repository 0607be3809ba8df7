"""`foundry purge --apply --retrain`: what to train again after a purge, one job per affected registered name.

A name is retrained when one of its versions was trained on a data version the purge rewrote: the newest such
version's recorded config trains again on the replacement, through the same gate and registration as any run.
Versions built from an affected parent (a fine-tune, a merge, an alignment) are listed, not retrained: their
own data and recipe belong to those commands (`foundry finetune`, `merge`, `align`), run again by their owner.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from foundry.core.contracts import DataVersion
from foundry.core.model_uri import ModelUri
from foundry.purge.record import PurgeRecord


class RetrainJob(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    trained: str  # the newest affected version of the name trained on the purged data: its config is reused
    data: DataVersion  # the replacement of that version's data


class RetrainPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    jobs: tuple[RetrainJob, ...]
    not_retrained: tuple[str, ...]  # affected versions no job covers, each with why


def plan(record: PurgeRecord, client) -> RetrainPlan:
    from foundry.registry import tags

    newest: dict[str, RetrainJob] = {}
    why_not: dict[str, str] = {}
    for uri in record.models:
        model = ModelUri.parse(uri)
        data = tags.recorded_data(client.get_model_version(model.name, model.version))
        new = record.replaced.get(data.data_version) if data is not None else None
        if new is None:
            why_not[uri] = (
                "its data was deleted, not rewritten" if data is not None else "built from an affected parent"
            )
            continue
        job = RetrainJob(name=model.name, trained=uri, data=DataVersion(data_version=new, remote=data.remote))
        current = newest.get(model.name)
        if current is None or int(model.version) > int(ModelUri.parse(current.trained).version):
            newest[model.name] = job
    chosen = {job.trained for job in newest.values()}
    left = [
        f"{uri}: {why_not.get(uri, 'a newer version of its name is retrained')}"
        for uri in record.models
        if uri not in chosen
    ]
    return RetrainPlan(jobs=tuple(sorted(newest.values(), key=lambda j: j.name)), not_retrained=tuple(left))
