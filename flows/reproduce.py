"""Re-train a registered model from its lineage: the recorded data version and config, fresh weights; an aligned
version from its parent, with the pretraining data it replayed.

foundry reproduce models:/foundry-gpt@champion [--force]
"""

from __future__ import annotations

from foundry.runtime.env import configure_environment

configure_environment()  # an entry point: `foundry reproduce` and Prefect workers import this module directly

from prefect import flow, runtime  # noqa: E402

from foundry.config import FoundryConfig, validate  # noqa: E402
from foundry.core.contracts import Reproduction  # noqa: E402
from foundry.core.run_tags import RunTags  # noqa: E402
from foundry.core.version_tags import GIT_COMMIT, GIT_DIRTY  # noqa: E402
from foundry.registry import lineage  # noqa: E402
from foundry.registry.versions import refuse_purged_versions, resolve  # noqa: E402
from foundry.reports.summaries import reproduce_summary  # noqa: E402
from foundry.runtime import tracking  # noqa: E402
from foundry.runtime.env import foundry_home  # noqa: E402
from foundry.runtime.logs import route_library_logs  # noqa: E402
from tasks.align import chat_base, hydrated_replay, parent_version, score_reproduced  # noqa: E402
from tasks.artifacts import publish_data_stage, publish_summary  # noqa: E402
from tasks.data import hydrate  # noqa: E402
from tasks.evaluation import evaluate  # noqa: E402
from tasks.policy import reproduction_allowed  # noqa: E402
from tasks.training import Training, train  # noqa: E402


@flow(name="reproduce", flow_run_name="reproduce-{model_uri}")
def reproduce(model_uri: str, force: bool = False, allow_purged: bool = False) -> Reproduction:
    """Hydrate the model's data version, train with its config, and compare holdout metrics. A version a purge
    tagged is refused unless `allow_purged`: it would train on the purged documents again."""
    route_library_logs()  # each line once, our INFO lines included
    refuse_purged_versions([model_uri], "reproduced", allow_purged)  # UI-started runs: only here
    record = lineage.lineage(model_uri, depth=1)[0]
    version = resolve(record.model)
    data = lineage.training_data(version)  # checked before anything runs: a bad tag stops here
    current = tracking.git_state()
    lineage.check_commit(record, current, force)
    trained = tracking.client().get_run(lineage.training_run_id(version)).data.tags
    config = validate(lineage.as_trained(record.config, trained))
    replayed = lineage.replayed_data(version, config, trained)  # an alignment's replay: refused if unrecorded
    config = _started_as_aligned(version, record.parent_model, config)
    reproduction_allowed(config, data)  # from a deployment: only the files and remote the operator allows
    if replayed is not None:
        reproduction_allowed(config, replayed)
    tags = RunTags(
        flow_run=str(runtime.flow_run.id),
        reproduces=record.model,
        stage="reproduce",
        replay_source="" if replayed is None else replayed.data_version,
    ).as_tags()
    with tracking.pipeline_run(config, f"reproduce {record.model}", tags) as run:
        data_dir = hydrate(data, run)
        publish_data_stage(data_dir)
        replay = None if replayed is None else hydrated_replay(replayed, run.home)  # the same windows, drawn again
        checkpoint = train(Training(config, data_dir, data, run, resume=False, replay=replay))
        comparison = _compared(version, config, checkpoint, data_dir, run)
    result = Reproduction(
        model=record.model,
        run_id=run.run_id,
        comparison=comparison,
        identical=lineage.identical(comparison),
        commit_matches=record.git_commit == current[GIT_COMMIT],
        tree_clean=record.git_dirty == current[GIT_DIRTY] == "false",
    )
    outcome = (
        "identical holdout metrics"
        if result.identical
        else "holdout metrics differ"
        if comparison
        else "no recorded holdout metrics to compare"
    )
    publish_summary(reproduce_summary(result), f"reproduce {record.model}", outcome, result.run_id)
    return result


def _compared(version, config, checkpoint, data_dir, run) -> dict[str, tuple[float, float]]:
    """The version's recorded holdout figures beside the re-trained model's: an aligned version's own held-out
    scores (and its base's pretraining holdout), a trained one's holdout metrics (`evaluate`)."""
    if lineage.aligned(version):
        scores = score_reproduced(config, checkpoint, data_dir, lineage.pretraining_data(version), run)
        return lineage.compare_scores(lineage.recorded_aligned(version), scores)
    metrics = evaluate(config, checkpoint, data_dir, run)
    return lineage.compare(lineage.recorded_holdout(version), metrics)


def _started_as_aligned(version, parent_uri: str, config: FoundryConfig) -> FoundryConfig:
    """An aligned version's start (`train.init_from`, `tokenizer.from_file`) rebuilt from its parent as `foundry
    align` built it, the template's tokens added: the recorded paths are files of the home that aligned it, which
    another home (or a `gc`) does not have. Any other version's config as recorded."""
    if not lineage.aligned(version):
        return config
    start = chat_base(parent_version(parent_uri, foundry_home()), foundry_home())
    return config.initialised_from(start)
