"""Merging specialists by their parameters: no training; the merge is scored on every parent's holdout.

    foundry merge models:/legal/1 models:/medical/1 --method ties [--base models:/foundry-gpt/3]

or from Python: `merge(models=["models:/legal/1", "models:/medical/1"], config=FoundryConfig())`.
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: `foundry merge` and Prefect workers import this module directly

from prefect import flow, runtime  # noqa: E402

from foundry.config import FoundryConfig  # noqa: E402
from foundry.core.model_uri import ModelUri  # noqa: E402
from foundry.core.run_tags import RunTags  # noqa: E402
from foundry.registry.versions import refuse_purged_versions  # noqa: E402
from foundry.reports.summaries import merge_summary  # noqa: E402
from foundry.runtime.logs import route_library_logs  # noqa: E402
from foundry.runtime.tracking import pipeline_run  # noqa: E402
from foundry.specialists.contracts import MergeResult  # noqa: E402
from tasks.artifacts import flow_config, publish_summary  # noqa: E402
from tasks.locks import promotion_lock  # noqa: E402
from tasks.merge import judge_merge, merge_base, merge_weights, register_merge, score_merge  # noqa: E402
from tasks.policy import allowed_by_operator  # noqa: E402


@flow(name="merge", flow_run_name=lambda: f"merge-{flow_config().merge.method}", log_prints=True)
def merge(models: list[str], config: FoundryConfig = FoundryConfig(), allow_purged: bool = False) -> MergeResult:
    """Find the models' common ancestor, merge their task vectors onto it (`merge.method`), score the merge on
    every parent's holdout and the base's, judge it (`merge.max_gap`), register it with every parent. A model or
    `merge.base` a purge tagged is refused unless `allow_purged`."""
    route_library_logs()  # each line once, our INFO lines included
    read = [*models, *([config.merge.base] if config.merge.base else [])]
    refuse_purged_versions(read, "merged", allow_purged)  # UI-started runs: only here
    allowed_by_operator(config)  # a deployment's parameters: only where the worker's operator allows
    if len(models) < 2:
        raise ValueError(f"a merge needs at least two models, got {models}")
    tags = RunTags(flow_run=str(runtime.flow_run.id), stage="merge").as_tags()
    with pipeline_run(config, runtime.flow_run.name, tags) as run:
        parents, base = merge_base(models, config, run)
        merged = merge_weights(parents, base, config, run)
        scores = score_merge(merged, parents, base, config, run)
        name = config.merge.resolved_model_name(ModelUri.parse(base).name)
        with promotion_lock(name, run.home):  # one flow at a time moves its aliases
            decision = judge_merge(scores, name, config, run)
            name, outcome = register_merge(merged, parents, base, decision, config, run)
    result = MergeResult(
        run_id=run.run_id,
        model_name=name,
        model_version=outcome.version,
        method=config.merge.method,
        base=base,
        parents=parents,
        decision=decision,
        promoted=outcome.promoted,
    )
    verdict = decision.verdict
    publish_summary(merge_summary(result), result.model_uri, verdict, result.run_id, name, result.model_version)
    return result
