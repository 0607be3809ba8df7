"""Honour a deletion request: find every copy of the documents it names and every version trained on them; with
`apply`, remove them everywhere and keep a purge record. A dry run unless `apply`.

    foundry purge (--match REGEX | --document SHA256 | --source PATH) --reason TEXT [--apply] [--keep-models]

or from Python: `purge_documents(match="...", reason="...", apply=True)`.
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: Prefect workers import this module directly

from prefect import flow, runtime  # noqa: E402

from foundry.config import validate  # noqa: E402
from foundry.core.contracts import PipelineResult  # noqa: E402
from foundry.core.run_tags import RunTags  # noqa: E402
from foundry.purge import record  # noqa: E402
from foundry.purge.plan import Criterion, summary  # noqa: E402
from foundry.purge.retrain import RetrainJob  # noqa: E402
from foundry.registry import lineage  # noqa: E402
from foundry.registry.versions import resolve  # noqa: E402
from foundry.runtime.logs import route_library_logs  # noqa: E402
from foundry.runtime.tracking import pipeline_run  # noqa: E402
from tasks.candidate import trained_candidate  # noqa: E402
from tasks.locks import promotion_lock  # noqa: E402
from tasks.policy import fleet_operation_allowed  # noqa: E402
from tasks.purge import publish_purge, remove, search  # noqa: E402
from tasks.registry import judge, register  # noqa: E402


@flow(name="purge")
def purge_documents(
    reason: str,
    match: str = "",
    document: str = "",
    source: str = "",
    apply: bool = False,
    keep_models: bool = False,
    remote: str = "",
) -> str:
    """Exactly one of `match` (a regular expression), `document` (a sha256) or `source` (a source file's name)
    selects the documents; `reason` is kept in the record; `remote` is one more DVC remote to look in."""
    route_library_logs()
    fleet_operation_allowed("purge", apply, remote)  # a deployment's parameters: only where the operator allows
    given = [(k, v) for k, v in (("match", match), ("document", document), ("source", source)) if v]
    if len(given) != 1:
        raise ValueError("give exactly one of match, document or source")
    criterion = Criterion(kind=given[0][0], value=given[0][1])
    remotes = {remote} if remote else set()
    if apply:
        removed = remove(criterion, reason, remotes, keep_models)
        text = record.summary(removed) if removed is not None else "nothing matched: nothing was removed"
    else:
        text = summary(search(criterion, reason, remotes))
    publish_purge(text, apply)
    return text


@flow(name="purge-retrain", flow_run_name=lambda: f"purge-retrain-{runtime.flow_run.parameters['job'].name}")
def retrain_purged(job: RetrainJob) -> PipelineResult:
    """One affected name trained again, with its newest affected version's config, on the purged data: the same
    gate and registration as any pipeline run (the purge took `champion` from the old version)."""
    route_library_logs()
    recorded = validate(lineage.recorded_config(resolve(job.trained)))
    config = recorded.registering_as(job.name)
    tags = RunTags(flow_run=str(runtime.flow_run.id), retrains=job.trained).as_tags()
    with pipeline_run(config, runtime.flow_run.name, tags) as run:
        candidate = trained_candidate(config, job.data, run)
        with promotion_lock(job.name, run.home):
            decision = judge(config, candidate, None)
            outcome = register(config, candidate, decision)
    return PipelineResult.of(candidate, job.name, outcome)
