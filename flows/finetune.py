"""Domain fine-tuning: specialise any registered version on an organisation's own data, through the same
data chain as pretraining (PII scrubbing included), the same training code, and a gate against the base.

    foundry finetune models:/foundry-gpt@champion --set data.source=/data/contracts [--set finetune.method=lora]
    foundry finetune models:/foundry-vision@champion --set data.source=/data/parts   # an image classifier

or from Python: `finetune(model="models:/foundry-gpt/3", config=FoundryConfig())`. An image classifier keeps its
`image` and `vision` settings and its classes' indices (new labels get new rows of its head), its first data builds
on its base's, and it is judged by holdout accuracy. Data of the other modality than the base's is refused at once.
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: `foundry finetune` and Prefect workers import this module directly

from prefect import flow, runtime  # noqa: E402

from foundry.config import FoundryConfig  # noqa: E402
from foundry.core import workload  # noqa: E402
from foundry.core.contracts import PipelineResult  # noqa: E402
from foundry.core.model_uri import ModelUri  # noqa: E402
from foundry.core.run_tags import RunTags  # noqa: E402
from foundry.registry.versions import refuse_purged_versions  # noqa: E402
from foundry.runtime.env import foundry_home  # noqa: E402
from foundry.runtime.logs import route_library_logs  # noqa: E402
from foundry.runtime.tracking import pipeline_run  # noqa: E402
from foundry.specialists.finetune import specialist_config  # noqa: E402
from tasks.artifacts import flow_config, publish_result  # noqa: E402
from tasks.candidate import trained_candidate  # noqa: E402
from tasks.data import DatasetJob, acquire, dataset  # noqa: E402
from tasks.locks import promotion_lock  # noqa: E402
from tasks.policy import allowed_by_operator  # noqa: E402
from tasks.registry import base_data, base_model, champion_data, judge_specialist, register  # noqa: E402


def _run_name() -> str:
    """`finetune-<method>-<base model's name>`; the data version is added once it is known."""
    base = ModelUri.parse(str(runtime.flow_run.parameters.get("model", ""))).name  # a bad URI stops the run here
    return f"finetune-{flow_config().finetune.method}-{base}"


@flow(name="finetune", flow_run_name=_run_name, log_prints=True)
def finetune(model: str, config: FoundryConfig = FoundryConfig(), allow_purged: bool = False) -> PipelineResult:
    """Start from `model`'s weights, tokenizer and architecture; acquire, prepare (its holdout sticky on the
    specialist's own champion's ledger; an image classifier's first, on its base's), train (`finetune.method`),
    evaluate, judge against the base, register. A `model` a purge tagged is refused unless `allow_purged`."""
    route_library_logs()  # each line once, our INFO lines included
    refuse_purged_versions([model], "fine-tuned", allow_purged)  # UI-started runs: only here
    allowed_by_operator(config)  # a deployment's parameters: only where the worker's operator allows
    base = base_model(model, foundry_home())  # fails closed: a registry error stops here
    tuned = specialist_config(config, base)
    tags = RunTags(flow_run=str(runtime.flow_run.id), stage="finetune", parent_model=base.uri).as_tags()
    with pipeline_run(tuned, runtime.flow_run.name, tags) as run:
        source_manifest = acquire(tuned, run)
        previous = champion_data(tuned, run)  # the specialist's champion: its ledger keeps each document's split
        if previous is None and workload.for_config(tuned).finetunes_on_base_data:
            previous = base_data(base, run)  # the base's classes keep their indices, its holdout stays holdout
        data = dataset(DatasetJob(tuned, source_manifest, run, previous))
        candidate = trained_candidate(tuned, data, run)  # hydrate, train, evaluate
        with promotion_lock(tuned.registry.model_name, run.home):  # one flow at a time moves its aliases
            decision = judge_specialist(tuned, candidate, base)
            outcome = register(tuned, candidate, decision, parent=base.uri)
    result = PipelineResult.of(candidate, tuned.registry.model_name, outcome, parent=base.uri)
    publish_result(result, foundry_home())
    return result
