"""The pipeline: raw text to a registered, evaluated model, one Prefect task per stage.

Run it with `foundry run` (see `foundry run --help`), or from Python:

    from flows.train_pipeline import train_pipeline
    train_pipeline(config=FoundryConfig())
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: `foundry run` and Prefect workers import this module directly

from prefect import flow, runtime  # noqa: E402

from foundry.config import FoundryConfig  # noqa: E402
from foundry.core.contracts import PipelineResult  # noqa: E402
from foundry.core.run_tags import RunTags  # noqa: E402
from foundry.runtime.env import foundry_home  # noqa: E402
from foundry.runtime.logs import route_library_logs  # noqa: E402
from foundry.runtime.tracking import pipeline_run  # noqa: E402
from tasks.artifacts import publish_result, run_name  # noqa: E402
from tasks.candidate import trained_candidate  # noqa: E402
from tasks.data import DatasetJob, acquire, dataset  # noqa: E402
from tasks.locks import promotion_lock  # noqa: E402
from tasks.policy import allowed_by_operator  # noqa: E402
from tasks.registry import champion_data, judge, register  # noqa: E402


@flow(name="train_pipeline", flow_run_name=lambda: run_name("train"), log_prints=True)
def train_pipeline(config: FoundryConfig = FoundryConfig()) -> PipelineResult:
    """Acquire, prepare, validate, version, hydrate, train, evaluate, judge, register and promote."""
    route_library_logs()  # each line once, our INFO lines included
    allowed_by_operator(config)  # a deployment's parameters: only where the worker's operator allows
    with pipeline_run(config, runtime.flow_run.name, RunTags(flow_run=str(runtime.flow_run.id)).as_tags()) as run:
        source_manifest = acquire(config, run)
        parent = champion_data(config, run)  # the champion's data: its ledger keeps each document's split
        data = dataset(
            DatasetJob(config, source_manifest, run, parent)
        )  # prepare, validate, version: cached by content
        candidate = trained_candidate(config, data, run)  # hydrate, train, evaluate
        with promotion_lock(config.registry.model_name, run.home):  # one flow at a time moves its aliases
            decision = judge(config, candidate, parent)
            outcome = register(config, candidate, decision)
    result = PipelineResult.of(candidate, config.registry.model_name, outcome)
    publish_result(result, foundry_home())
    return result
