"""Score registered versions on data of one's choice, beside the baselines, and compare them.

    foundry evaluate models:/foundry-gpt/3 models:/foundry-gpt-contracts@champion --data 0123…ef (a data version)
    foundry evaluate models:/foundry-gpt@champion --data /data/tickets          (a folder, a URL, stdlib://…)

or from Python: `evaluate(models=["models:/foundry-gpt/3"], data="stdlib://email", config=FoundryConfig())`.
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: `foundry evaluate` and Prefect workers import this module directly

from prefect import flow, runtime  # noqa: E402

from foundry.config import FoundryConfig  # noqa: E402
from foundry.core.run_tags import RunTags  # noqa: E402
from foundry.evaluate.report import comparison, outcome  # noqa: E402
from foundry.evaluate.scores import Evaluation, run_label, source_config  # noqa: E402
from foundry.registry.versions import refuse_purged_versions  # noqa: E402
from foundry.runtime.logs import route_library_logs  # noqa: E402
from foundry.runtime.tracking import pipeline_run  # noqa: E402
from tasks.artifacts import publish_summary  # noqa: E402
from tasks.evaluate import baselines, compare, download_models, evaluation_data, resolve_models, score_model  # noqa: E402
from tasks.policy import allowed_by_operator  # noqa: E402


@flow(name="evaluate", flow_run_name=lambda: f"evaluate-{run_label(runtime.flow_run.parameters['data'])}")
def evaluate(
    models: list[str], data: str, config: FoundryConfig = FoundryConfig(), allow_purged: bool = False
) -> Evaluation:
    """Each model on the data (a data version, or a source prepared without touching any split ledger), with its
    own tokenizer, overall and per group of source files (on chat records: each aligned model's exact match);
    one MLflow run per model, linked to its version. A model a purge tagged is refused unless `allow_purged`."""
    route_library_logs()  # each line once, our INFO lines included
    refuse_purged_versions(models, "evaluated", allow_purged)  # UI-started runs: only here
    config = source_config(config, data)  # a source is `data.source`: the operator's allow-lists judge it
    allowed_by_operator(config)  # a deployment's parameters: only where the worker's operator allows
    refs = resolve_models(models)  # fails closed, before any run or data exists
    tags = RunTags(flow_run=str(runtime.flow_run.id), stage="evaluate").as_tags()
    with pipeline_run(config, runtime.flow_run.name, tags) as run:
        refs = download_models(refs, run)
        prepared = evaluation_data(data, config, refs, run)
        base = baselines(prepared, config)
        scores = [score_model(ref, prepared, base, config, run) for ref in refs]
        result = compare(prepared, base, scores, run)
    publish_summary(comparison(result), f"evaluate on {prepared.label}", outcome(result), result.run_id)
    return result
