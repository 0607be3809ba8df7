"""`foundry evaluate` in MLflow: one run per model, a child of the evaluation's own run, linked to the version.

Each model's run records the data as its dataset input (context `evaluation`: a data version as training records
it, `dvc+<remote>#<version>`; a source not versioned by its content digest) and the version's logged model as
its model input, and logs the model's figures as `eval/<field>` (per group `eval/group/<group>/<field>`) with
`model_id` and the dataset's name and digest: MLflow 3's model-linked metrics, which the logged model's page,
and the version's through it, list by dataset. Versions logged before MLflow 3's logged models have none; their
figures stay on the run. The baselines (`eval/baseline/<name>_bits_per_byte`, per group
`eval/group/<group>/baseline/<name>_bits_per_byte`) depend on the data alone and are logged on the runs (each
model's and the evaluation's own), not on the models. Tags name the model URI asked for, the version and the data.
On chat records the figures are `eval/exact_match`, `eval/response_loss` and `eval/records`, linked the same way; a
model that is not comparable has a run tagged `foundry.comparable=false` with the reason, and no figures. An image
classifier's are `eval/accuracy`, `eval/macro_f1`, `eval/loss`, `eval/images` and `eval/class_accuracy/<label>`,
its baselines `eval/baseline/<name>_accuracy`.
"""

from __future__ import annotations

import re
import time

from foundry.core import run_tags
from foundry.core import version_tags as tag
from foundry.core.contracts import RunContext
from foundry.core.redact import redact_url
from foundry.evaluate.scores import Baselines, EvaluationData, ModelScores
from foundry.evaluate.scoring import scoring_of
from foundry.runtime import tracking

PREFIX = "eval/"
CONTEXT = "evaluation"


def metric_key(field: str, group: str | None = None) -> str:
    """`eval/<field>`, or `eval/group/<group>/<field>` with the group's name in MLflow's key characters."""
    if group is None:
        return PREFIX + field
    safe = re.sub(r"[^A-Za-z0-9_.\- ]", "_", group)
    return f"{PREFIX}group/{safe}/{field}"


def data_tags(data: EvaluationData) -> dict[str, str]:
    """The data as run tags: its version and remote, or the source and its digest."""
    if data.data_version:
        return {tag.DATA_VERSION: data.data_version, tag.DATA_REMOTE: redact_url(data.remote or "")}
    return {tag.DATA_SOURCE: data.source, tag.SOURCE_DIGEST: data.source_digest}


def dataset_input(data: EvaluationData):
    """The data as an MLflow dataset input of context `evaluation` (a URI that is recorded, never fetched)."""
    from mlflow.data.http_dataset_source import HTTPDatasetSource
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    where = f"dvc+{redact_url(data.remote or '')}#{data.data_version}" if data.data_version else data.source
    dataset = MetaDataset(source=HTTPDatasetSource(where), name=data.name, digest=data.digest)
    tags = [InputTag(run_tags.DATASET_CONTEXT, CONTEXT), InputTag(run_tags.DATASET_SOURCE, data.source)]
    return DatasetInput(dataset._to_mlflow_entity(), tags=tags)


def log_model_run(parent: RunContext, scores: ModelScores, data: EvaluationData, baselines: Baselines) -> str:
    """The model's evaluation run, finished; returns its id."""
    from mlflow.entities import LoggedModelInput, Metric

    c, scoring = tracking.client(), scoring_of(data)
    experiment = c.get_run(parent.run_id).info.experiment_id
    ref = scores.model
    tags = {
        run_tags.PARENT_RUN: parent.run_id,
        run_tags.STAGE: "evaluate",
        run_tags.EVALUATES: ref.model,
        run_tags.ASKED: ref.asked,
        **({run_tags.TOKENIZER: scores.tokenizer} if scores.tokenizer else {}),  # image classifiers have none
        **data_tags(data),
        **tracking.standard_tags(),
        **scoring.run_tags(scores),
    }
    run = c.create_run(experiment, run_name=f"evaluate {ref.model} on {data.name}", tags=tags)
    run_id = run.info.run_id
    try:
        models = [LoggedModelInput(ref.model_id)] if ref.model_id else None
        c.log_inputs(run_id, datasets=[dataset_input(data)], models=models)
        now = int(time.time() * 1000)
        linked = {"model_id": ref.model_id, "dataset_name": data.name, "dataset_digest": data.digest}
        batch = [Metric(k, v, now, 0, **(linked if ref.model_id else {})) for k, v in scoring.metrics(scores).items()]
        batch += [Metric(k, v, now, 0) for k, v in scoring.baseline_metrics(baselines).items()]
        for start in range(0, len(batch), 1000):  # MLflow's batch limit
            c.log_batch(run_id, metrics=batch[start : start + 1000])
    except BaseException:
        tracking.end_run(run_id, ok=False)
        raise
    tracking.end_run(run_id, ok=True)
    return run_id


def log_comparison(parent: RunContext, data: EvaluationData, baselines: Baselines, text: str, chart) -> None:
    """On the evaluation's own run: the data (tags, input and its counts as `data/...`: what `data.on_error=skip`
    dropped is counted there), the baselines as metrics, the comparison as `evaluation/comparison.md` and the chart
    (if any) under `evaluation/`."""
    from mlflow.entities import Metric

    from foundry.data.manifest import DatasetManifest

    c = tracking.client()
    tracking.set_tags(parent.run_id, {run_tags.STAGE: "evaluate", **data_tags(data)})
    c.log_inputs(parent.run_id, datasets=[dataset_input(data)])
    counts = DatasetManifest.read(data.dir).data_metrics()
    now, batch = int(time.time() * 1000), [*counts.items(), *scoring_of(data).baseline_metrics(baselines).items()]
    for start in range(0, len(batch), 1000):  # MLflow's batch limit
        c.log_batch(parent.run_id, metrics=[Metric(k, v, now, 0) for k, v in batch[start : start + 1000]])
    c.log_text(parent.run_id, text + "\n", "evaluation/comparison.md")
    if chart is not None:
        tracking.log_artifact(parent.run_id, chart, "evaluation")
