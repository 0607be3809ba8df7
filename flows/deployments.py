"""The deployments, declared once: `foundry serve` serves them, and `prefect.yaml` (for workers) is
written from the same table (`foundry deployments --write prefect.yaml`; a test keeps the two equal).

- train:     the whole pipeline; its parameter is the config, so the Prefect UI shows it as a form
- retrain:   fine-tune the champion on what is new, on `retrain.cron` (weekly by default)
- reproduce: re-train a registered model from its lineage and compare metrics
- search:    hyperparameter search; the space, budget, sampler and pruner are the form's `search` section
- align:     instruction tuning or preference optimisation of a registered version (its model_uri is asked at run time)
- finetune:  specialise a registered version on the form's data source (the model to start from, then the config)
- merge:     merge registered specialists by their parameters (the models to merge, then the config's `merge`)
- evaluate:  score registered versions on a data version or a source (the models, the data, then the config)
- gc:        list what nothing references (dry run by default; `apply` deletes it)
- purge:     find every copy of the documents a deletion request names (dry run by default; `apply` removes them)

A run started from a deployment may only point where the worker's operator allows: sources, remotes, Dask
schedulers and study storages outside the lists in `foundry.runtime.deployment_policy` are refused in its first task.

`train` and `retrain` run one at a time each: a run started while another is running waits in the queue
(deployment concurrency limit 1, strategy ENQUEUE).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from foundry.config import FoundryConfig


@dataclass(frozen=True)
class Deployment:
    name: str
    entrypoint: str  # path:function, relative to the checkout
    description: str
    takes_config: bool = True  # its parameter is the config (the UI form), prefilled with the served config
    scheduled: bool = False  # on `retrain.cron`
    one_at_a_time: bool = False  # concurrency limit 1; the next run waits in the queue


ONE_AT_A_TIME = {"limit": 1, "collision_strategy": "ENQUEUE"}


DEPLOYMENTS = (
    Deployment(
        "train",
        "flows/train_pipeline.py:train_pipeline",
        "Raw text to a registered model: the whole pipeline.",
        one_at_a_time=True,
    ),
    Deployment(
        "retrain",
        "flows/retrain.py:retrain",
        "Fine-tune the champion on new source documents; promote through the gate.",
        scheduled=True,
        one_at_a_time=True,
    ),
    Deployment(
        "reproduce",
        "flows/reproduce.py:reproduce",
        "Re-train a registered model from its recorded data version and config.",
        takes_config=False,
    ),
    Deployment(
        "search",
        "flows/search.py:search",
        "Hyperparameter search over the config's `search` space (editable in the form); writes the best config.",
    ),
    Deployment(
        "align",
        "flows/align.py:align",
        "Instruction-tune (sft) or preference-optimise (dpo) a registered version: model_uri, align.method, data.source.",
    ),
    Deployment(
        "finetune",
        "flows/finetune.py:finetune",
        "Specialise a registered version on the config's data source (full or LoRA); gated against that base.",
    ),
    Deployment(
        "merge",
        "flows/merge.py:merge",
        "Merge registered specialists by their parameters (no training); scored, gated and registered with lineage.",
    ),
    Deployment(
        "evaluate",
        "flows/evaluate.py:evaluate",
        "Score registered versions (models) on a data version or a source (data), beside the baselines; compared.",
    ),
    Deployment(
        "gc",
        "flows/gc.py:collect_garbage",
        "List what no registered version, alias, running flow or recent run references; delete it only with apply.",
        takes_config=False,
    ),
    Deployment(
        "purge",
        "flows/purge.py:purge_documents",
        "Find every copy of the documents a deletion request names and every version trained on them; "
        "remove them only with apply.",
        takes_config=False,
    ),
)
WORK_POOL = "foundry"
TAGS = ["foundry"]
HEADER = """\
# Deployments for Prefect workers (`prefect deploy --all`, then `prefect worker start --pool foundry`).
# Written by `foundry deployments --write prefect.yaml` from flows/deployments.py, which `foundry serve`
# serves as well; do not edit by hand. The retrain schedule is the default `retrain.cron`.
"""


def build_deployments(config: FoundryConfig) -> list:
    """Runner deployments for `foundry serve`, each flow loaded from its entrypoint."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig
    from prefect.flows import load_flow_from_entrypoint

    from foundry.runtime.env import PROJECT_ROOT

    built = []
    for d in DEPLOYMENTS:
        path, _, function = d.entrypoint.partition(":")
        flow = load_flow_from_entrypoint(f"{PROJECT_ROOT / path}:{function}")
        built.append(
            flow.to_deployment(
                name=d.name,
                description=d.description,
                tags=TAGS,
                parameters={"config": config.model_dump(mode="json")} if d.takes_config else None,
                cron=config.retrain.cron if d.scheduled else None,
                concurrency_limit=ConcurrencyLimitConfig(**ONE_AT_A_TIME) if d.one_at_a_time else None,
            )
        )
    return built


def prefect_yaml(config: FoundryConfig) -> str:
    """`prefect.yaml` for a process work pool: the same deployments, parameters from the flows' defaults."""
    declared = []
    for d in DEPLOYMENTS:
        entry = {
            "name": d.name,
            "entrypoint": d.entrypoint,
            "description": d.description,
            "tags": list(TAGS),
            "work_pool": {"name": WORK_POOL},
            "parameters": {},
        }
        if d.scheduled:
            entry["schedules"] = [{"cron": config.retrain.cron}]
        if d.one_at_a_time:
            entry["concurrency_limit"] = dict(ONE_AT_A_TIME)
        declared.append(entry)
    document = {
        "name": "foundry",
        "prefect-version": _prefect_version(),
        "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $FOUNDRY_PROJECT_DIR }}"}}],
        "deployments": declared,
    }
    return HEADER + yaml.safe_dump(document, sort_keys=False, width=120)


def _prefect_version() -> str:
    from importlib import metadata

    return metadata.version("prefect")


def serve(config: FoundryConfig, automations: bool = False) -> None:
    """Register the deployments with the configured Prefect API and run their flow runs here until stopped;
    with `automations`, also create the example automation (`flows/automations.py`) that uses them. The
    served config's own sources, remote, schedulers and storage join the operator's allow-lists, which the
    flow runs started here inherit (`foundry.runtime.deployment_policy`)."""
    import os

    import prefect

    from foundry.runtime.deployment_policy import served_config_allowed

    os.environ.update(served_config_allowed(config, dict(os.environ)))
    deployments = build_deployments(config)
    if automations:
        from flows.automations import create_automations

        for deployment in deployments:  # registered first: the automation names its deployment
            deployment.apply()
        create_automations()
    prefect.serve(*deployments, print_starting_message=False)
