"""What the Prefect run page shows: the summary, the data stage, links to MLflow, and progress (training, preparation).

Artifacts are keyed (lowercase, dashes) so the Artifacts page lists each kind with its history across runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from prefect import get_run_logger, runtime, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext, TaskRunContext

from foundry.config import FoundryConfig
from foundry.core import workload
from foundry.core.contracts import PipelineResult
from foundry.core.model_uri import ModelUri
from foundry.runtime import tracking
from foundry.runtime.periodic import every
from foundry.runtime.progress import Report

SUMMARY, DATA_STAGE, PROGRESS = "pipeline-summary", "data-stage", "training-progress"
MLFLOW_RUN, MODEL_VERSION = "mlflow-run", "model-version"


def flow_config() -> FoundryConfig:
    """The running flow run's config parameter (its default when not given)."""
    config = runtime.flow_run.parameters.get("config") or FoundryConfig()
    if not isinstance(config, FoundryConfig):  # a deployment's parameters before validation
        config = FoundryConfig.model_validate(config)
    return config


def run_name(prefix: str) -> str:
    """`<prefix>-<model name>`, from the flow run's config; the data version is added once it is known."""
    return f"{prefix}-{flow_config().registry.model_name}"


def name_flow_run(name: str) -> None:
    """Rename the running flow run once what it works on is known (the data version is, after hydration)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.update_flow_run(runtime.flow_run.id, name=name)


@task(name="data-stage-report", cache_policy=NO_CACHE)
def publish_data_stage(data_dir: Path) -> None:
    """Documents in and kept, drops by reason and PII replaced by kind, as a table; the summary line in the log
    (whether or not this run prepared the data: the cache may have served it)."""
    table, summary = workload.for_data(data_dir).data_stage(data_dir)  # as the data's workload audits it
    create_table_artifact(table, key=DATA_STAGE, description=f"Data stage of {data_dir.name}", _sync=True)
    get_run_logger().info(summary)


@task(name="report", cache_policy=NO_CACHE)
def publish_summary(
    summary: str, title: str, description: str, run_id: str, model_name: str | None = None, version: str | None = None
) -> None:
    """The summary the terminal prints, as markdown, and links to the MLflow run and (when the flow registered
    one) the version."""
    experiment = tracking.client().get_run(run_id).info.experiment_id
    links = tracking.ui_links(experiment, run_id, model_name, version)
    pages = f"[MLflow run]({links.run})" + (f" · [model version]({links.version})" if links.version else "")
    body = f"# {title}\n\n```\n{summary}\n```\n\n{pages}\n"
    create_markdown_artifact(body, key=SUMMARY, description=description, _sync=True)
    create_link_artifact(links.run, f"MLflow run {run_id}", key=MLFLOW_RUN, _sync=True)
    if links.version:
        create_link_artifact(
            links.version, str(ModelUri(name=model_name, version=str(version))), key=MODEL_VERSION, _sync=True
        )


def publish_result(result: PipelineResult, home: Path) -> None:
    """What a flow that trained and registered a model shows: `foundry run`'s summary, its run and version."""
    from foundry.reports.summaries import pipeline_summary

    summary = pipeline_summary(result, home)
    publish_summary(summary, result.model_uri, result.verdict, result.run_id, result.model_name, result.model_version)


@contextmanager
def training_progress(progress_file: Path, total: int, every_s: float) -> Iterator[None]:
    """A progress artifact and a log line every `every_s` seconds while training writes `progress_file`;
    the artifact ends at the last step reached (100% when training finished)."""
    from foundry.training.progress import read_progress

    with reported_progress(progress_file, every_s, read_progress, f"optimizer steps of {total}"):
        yield


@contextmanager
def reported_progress(
    progress_file: Path, every_s: float, read: Callable[[Path], Report | None], artifact: str | None = None
) -> Iterator[None]:
    """A log line every `every_s` seconds while a stage writes `progress_file` (`foundry.runtime.progress`), when what
    it says changed, and a last one at the end; with `artifact` (its description) a progress artifact too."""
    in_a_run = TaskRunContext.get() is not None or FlowRunContext.get() is not None
    # Called directly (`train_task.fn`, a notebook), there is no run page: the lines go to the log alone.
    logger = get_run_logger() if in_a_run else logging.getLogger(__name__)
    made = None
    if in_a_run and artifact is not None:
        made = create_progress_artifact(0.0, key=PROGRESS, description=artifact, _sync=True)
    seen = []

    def report() -> None:
        nonlocal made
        now = read(progress_file)
        if now is None or (seen and seen[-1] == now.line()):
            return
        seen.append(now.line())
        logger.info(now.line())  # first: the line keeps the rhythm, whatever the API call below takes
        if made is not None:
            try:
                update_progress_artifact(made, now.percent, description=now.line(), _sync=True)
            except httpx.TransportError as exc:  # the server away past its client's retries (~62 s)
                made = None  # the bar stops; the stage, and these lines, go on (a finished training is not lost)
                logger.warning("the Prefect server did not take the progress artifact (%s): not updated any more", exc)

    progress_file.unlink(missing_ok=True)  # an earlier attempt's last report is not this one's
    try:
        with every(every_s, report):
            yield
    finally:
        report()
