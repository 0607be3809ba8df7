"""Hyperparameter search: the data prepared once, then a study's trials in parallel on Dask.

Run it with `foundry search` (see `foundry search --help`), or from Python:

    from flows.search import search
    search(config=load_config("configs/tiny.yaml"))

The space, budget, sampler and pruner are the config's `search` section. Re-running the same command
after a crash continues the study (`foundry/search/study.py`).
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: `foundry search` and Prefect workers import this module directly

from prefect import flow, runtime  # noqa: E402

from foundry.config import FoundryConfig  # noqa: E402
from foundry.core.contracts import SearchResult, TrialData  # noqa: E402
from foundry.core.run_tags import RunTags  # noqa: E402
from foundry.reports.summaries import search_summary  # noqa: E402
from foundry.search.records import study_run  # noqa: E402
from foundry.search.study import data_key, data_variants  # noqa: E402
from tasks.artifacts import flow_config, publish_summary  # noqa: E402
from tasks.data import DatasetJob, acquire, dataset, hydrate  # noqa: E402
from tasks.policy import allowed_by_operator  # noqa: E402
from tasks.search import record, run_trials  # noqa: E402


@flow(name="search", flow_run_name=lambda: f"search-{flow_config().search.study_name}", log_prints=True)
def search(config: FoundryConfig = FoundryConfig()) -> SearchResult:
    """Acquire, then prepare, validate, version and hydrate each dataset the space needs; run the trials;
    record the study and write the best config."""
    allowed_by_operator(config)  # a deployment's parameters: only where the worker's operator allows
    tags = RunTags(flow_run=str(runtime.flow_run.id)).as_tags()
    with study_run(config, runtime.flow_run.name, tags) as (run, study):
        source_manifest = acquire(config, run)
        datasets = {}
        for variant in data_variants(config):  # one per value of the searched tokenizer keys
            data = dataset(DatasetJob(variant, source_manifest, run))  # cached by content: prepared once
            data_dir = hydrate(data, run)
            datasets[data_key(variant)] = TrialData(
                data_version=data.data_version, remote=data.remote, data_dir=data_dir
            )
        run_trials(config, study, datasets, run)
        result = record(config, study, run)
    best = "no trial completed" if result.best_number is None else f"best: trial {result.best_number}"
    publish_summary(search_summary(result), f"search {result.study_name}", best, result.run_id)
    return result
