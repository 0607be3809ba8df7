"""Alignment: instruction tuning (sft) or preference optimisation (dpo) of any registered version.

foundry align models:/foundry-gpt@champion --set data.source=chat/ --set align.method=sft
foundry align models:/foundry-chat/1 --set data.source=preferences/ --set align.method=dpo
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: `foundry align` and Prefect workers import this module directly

from prefect import flow, runtime  # noqa: E402

from foundry.align.start import align_config  # noqa: E402
from foundry.config import FoundryConfig  # noqa: E402
from foundry.core.contracts import AlignResult, Candidate  # noqa: E402
from foundry.core.energy import RunEnergy  # noqa: E402
from foundry.core.run_tags import RunTags  # noqa: E402
from foundry.registry.versions import refuse_purged_versions  # noqa: E402
from foundry.reports.summaries import align_summary  # noqa: E402
from foundry.runtime.env import foundry_home  # noqa: E402
from foundry.runtime.logs import route_library_logs  # noqa: E402
from foundry.runtime.tracking import pipeline_run  # noqa: E402
from tasks.align import (  # noqa: E402
    align_dataset,
    chat_base,
    evaluate_aligned,
    judge_aligned,
    parent_version,
    register_aligned,
    replay_source,
)
from tasks.artifacts import flow_config, name_flow_run, publish_data_stage, publish_summary  # noqa: E402
from tasks.data import acquire, hydrate  # noqa: E402
from tasks.locks import promotion_lock  # noqa: E402
from tasks.policy import allowed_by_operator  # noqa: E402
from tasks.training import Training, train  # noqa: E402


def _run_name() -> str:
    """`align-<method>-<align.model_name>`; the data version is added once it is known."""
    a = flow_config().align
    return f"align-{a.method}-{a.model_name}"


@flow(name="align", flow_run_name=_run_name, log_prints=True)
def align(model_uri: str, config: FoundryConfig = FoundryConfig(), allow_purged: bool = False) -> AlignResult:
    """Start from `model_uri` with the chat template's tokens; acquire, check and version the records; train
    with the method's loss; evaluate beside the base; judge, and publish under `align.model_name`. A `model_uri`
    a purge tagged is refused unless `allow_purged`."""
    route_library_logs()  # each line once, our INFO lines included
    refuse_purged_versions([model_uri], "aligned", allow_purged)  # UI-started runs: only here
    allowed_by_operator(config)  # a deployment's parameters: only where the worker's operator allows
    parent = parent_version(model_uri, foundry_home())
    base = chat_base(parent, foundry_home())
    tuned = align_config(config, base)
    replay = replay_source(tuned, parent, foundry_home())  # None, or the base's pretraining data, hydrated
    tags = RunTags(
        flow_run=str(runtime.flow_run.id),
        stage="align",
        parent_model=parent.uri,
        align_method=config.align.method,
        replay_source="" if replay is None else replay.data.data_version,
    ).as_tags()
    with pipeline_run(tuned, runtime.flow_run.name, tags) as run:
        source_manifest = acquire(tuned, run)
        data = align_dataset(tuned, source_manifest, run)  # check, scrub, encode, validate, version: cached
        data_dir = hydrate(data, run)
        name_flow_run(f"{runtime.flow_run.name}-{data.data_version[:8]}")
        publish_data_stage(data_dir)
        checkpoint = train(Training(tuned, data_dir, data, run, replay=replay))
        metrics = evaluate_aligned(tuned, checkpoint, parent, base, data_dir, run)
        candidate = Candidate(checkpoint=checkpoint, data=data, data_dir=data_dir, metrics=metrics, run=run)
        with promotion_lock(tuned.registry.model_name, run.home):  # one flow at a time moves its aliases
            decision = judge_aligned(tuned, candidate)
            outcome = register_aligned(tuned, candidate, decision, parent)
    result = AlignResult(
        run_id=run.run_id,
        model_name=tuned.registry.model_name,
        model_version=outcome.version,
        data_version=data.data_version,
        parent=parent.uri,
        method=tuned.align.method,
        metrics=metrics,
        promoted=outcome.promoted,
        verdict=outcome.verdict,
        energy=RunEnergy.read(run.dir),
    )
    summary = align_summary(result)
    publish_summary(summary, result.model_uri, result.verdict, result.run_id, result.model_name, result.model_version)
    return result
