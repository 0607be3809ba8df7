"""Merging specialists as Prefect tasks: the base, the merged weights, the scores and the gate, publication."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from foundry.core.contracts import Promotion, RunContext
from foundry.core.version_tags import GIT_COMMIT, GIT_DIRTY, MERGE_BASE, PARENT_MODEL, VersionTags
from foundry.gates.decision import Decision
from foundry.runtime import tracking
from foundry.specialists.contracts import HoldoutScore


@task(name="merge-base", cache_policy=NO_CACHE)
def merge_base(model_uris: list[str], config: FoundryConfig, run: RunContext) -> tuple[list[str], str]:
    """The models as models:/NAME/VERSION, and the base their task vectors are taken from (refused when it is
    not their common ancestor, unless forced)."""
    from foundry.specialists.merging import canonical, choose_base

    parents = [canonical(uri) for uri in model_uris]
    base = choose_base(parents, config)
    tracking.set_tags(run.run_id, {MERGE_BASE: base, PARENT_MODEL: ",".join(parents)})
    get_run_logger().info("merging %s onto %s by %s", ", ".join(parents), base, config.merge.method)
    return parents, base


@task(name="merge-weights", cache_policy=NO_CACHE)
def merge_weights(parents: list[str], base: str, config: FoundryConfig, run: RunContext) -> Path:
    """The merged model.pt and tokenizer.json in the run's folder; refused for mismatched models."""
    from foundry.specialists import merging

    folder = merging.merge_weights(parents, base, config, run.dir / "merged")
    tracking.client().log_dict(run.run_id, merging.recipe(parents, base, config), "merge/recipe.json")
    return folder


@task(name="score-merge", cache_policy=NO_CACHE)
def score_merge(
    merged: Path, parents: list[str], base: str, config: FoundryConfig, run: RunContext
) -> list[HoldoutScore]:
    """The merge beside the base (and each specialist) on every parent's holdout and on the base's."""
    from foundry.specialists.merging import score_holdouts, score_metrics

    scores = score_holdouts(merged, parents, base, config, run.home)
    tracking.log_metrics(run.run_id, score_metrics(scores))
    return scores


@task(name="judge-merge", cache_policy=NO_CACHE)
def judge_merge(scores: list[HoldoutScore], name: str, config: FoundryConfig, run: RunContext) -> Decision:
    """The merge gate (`foundry.gates.merge`) on the scores and the champion of `name` scored on the same
    holdouts (the caller holds its promotion lock); its verdict and inputs tagged on the run."""
    from foundry.gates import merge as gate
    from foundry.specialists.gate import gather_merge

    decision = gate.decide(gather_merge(config, scores, name, run.home))
    tracking.set_tags(run.run_id, decision.tags())
    get_run_logger().info("merge gate: %s", decision.verdict)
    return decision


@task(name="register-merge", cache_policy=NO_CACHE)
def register_merge(
    merged: Path, parents: list[str], base: str, decision: Decision, config: FoundryConfig, run: RunContext
) -> tuple[str, Promotion]:
    """Publish the merge (all of it or nothing): every parent in `parent_model`, the recipe in a tag and in
    the model card, the base's data version as its own (the holdout its `holdout/*` scores come from)."""
    from foundry.registry import tags as registry_tags
    from foundry.registry import versions
    from foundry.reports.cards import merge_card
    from foundry.serving.package import log_model
    from foundry.specialists.merging import recipe
    from models.gpt import load_gpt

    base_version = versions.resolve(base)
    name = config.merge.resolved_model_name(base_version.name)
    made = recipe(parents, base, config)
    uri = log_model(run.run_id, merged / "model.pt", merged / "tokenizer.json", config.serving.model_dump())
    run_tags = tracking.client().get_run(run.run_id).data.tags
    base_data = registry_tags.recorded_data(base_version)  # checked: a bad tag stops the publication
    git = tracking.run_git(run_tags)
    tags = VersionTags(
        run_id=run.run_id,
        data_version="" if base_data is None else base_data.data_version,
        data_remote="" if base_data is None else base_data.remote,
        data_source=f"merge of {', '.join(parents)}",
        # the config is the run's params and config.json, the scores its metrics, the packages its tags
        git_commit=git.get(GIT_COMMIT),
        git_dirty=git.get(GIT_DIRTY),
        gate=decision.tags(),
        parent_model=",".join(parents),
        merge_base=base,
        merge_recipe=json.dumps(made),
    ).as_tags()
    card = merge_card(name, made, decision, load_gpt(merged / "model.pt").num_params(), run.run_id)
    outcome = versions.publish(uri, name, run.run_id, tags, decision.make_champion, decision.verdict, card)
    return name, outcome
