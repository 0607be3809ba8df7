"""Scheduled retraining: fine-tune the champion on what is new in the source, promote through the gate.

    foundry retrain [--config FILE] [--set section.key=value ...]

Deployed by `foundry serve` (and prefect.yaml) on `retrain.cron`, weekly by default.
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: `foundry retrain` and Prefect workers import this module directly

from prefect import flow, runtime  # noqa: E402

from foundry.config import FoundryConfig  # noqa: E402
from foundry.core.contracts import PipelineResult, SkippedRun  # noqa: E402
from foundry.core.run_tags import RunTags  # noqa: E402
from foundry.reports.summaries import skipped_summary  # noqa: E402
from foundry.runtime.env import foundry_home  # noqa: E402
from foundry.runtime.logs import route_library_logs  # noqa: E402
from foundry.runtime.tracking import pipeline_run  # noqa: E402
from foundry.training.warm_start import retrain_config  # noqa: E402
from tasks.artifacts import publish_result, publish_summary, run_name  # noqa: E402
from tasks.candidate import trained_candidate  # noqa: E402
from tasks.data import DatasetJob, acquire, dataset  # noqa: E402
from tasks.locks import promotion_lock  # noqa: E402
from tasks.policy import allowed_by_operator  # noqa: E402
from tasks.registry import champion_parent, judge, register, whats_new  # noqa: E402


@flow(name="retrain", flow_run_name=lambda: run_name("retrain"), log_prints=True)
def retrain(config: FoundryConfig = FoundryConfig()) -> PipelineResult | SkippedRun:
    """Acquire, compare with the champion's data, and only if something is new: version on the champion's
    ledger (new documents plus a replay sample of its training documents), fine-tune, judge, register."""
    route_library_logs()  # each line once, our INFO lines included
    allowed_by_operator(config)  # a deployment's parameters: only where the worker's operator allows
    parent = champion_parent(config, foundry_home())  # fails closed: a registry error is not "no champion"
    tuned = retrain_config(config, parent)
    tags = RunTags(flow_run=str(runtime.flow_run.id), stage="retrain", parent_model=parent.uri).as_tags()
    with pipeline_run(tuned, runtime.flow_run.name, tags) as run:
        source_manifest = acquire(tuned, run)
        if not whats_new(source_manifest, parent, run):
            skipped = SkippedRun(
                run_id=run.run_id,
                parent=parent.uri,
                reason=f"nothing new in {', '.join(config.data.source_list)} since {parent.uri}",
            )
            publish_summary(skipped_summary(skipped), "retrain: nothing new", skipped.reason, run.run_id)
            return skipped
        data = dataset(DatasetJob(tuned, source_manifest, run, parent.data, tuned.retrain.replay_fraction))
        candidate = trained_candidate(tuned, data, run)  # hydrate, train, evaluate
        with promotion_lock(tuned.registry.model_name, run.home):  # one flow at a time moves its aliases
            decision = judge(tuned, candidate, parent.data)
            outcome = register(tuned, candidate, decision, parent=parent.uri)
    result = PipelineResult.of(candidate, tuned.registry.model_name, outcome, parent=parent.uri)
    publish_result(result, foundry_home())
    return result
