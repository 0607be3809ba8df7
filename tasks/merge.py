"""Merging specialists as Prefect tasks: the base, the merged weights, the scores and the gate, publication."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry import tracking
from foundry.adapt.contracts import HoldoutScore, MergeDecision
from foundry.config import FoundryConfig
from foundry.contracts import Promotion, RunContext


@task(name="merge-base", cache_policy=NO_CACHE)
def merge_base(model_uris: list[str], config: FoundryConfig, run: RunContext) -> tuple[list[str], str]:
    """The models as models:/NAME/VERSION, and the base their task vectors are taken from (refused when it is
    not their common ancestor, unless forced)."""
    from foundry.adapt.merging import canonical, choose_base

    parents = [canonical(uri) for uri in model_uris]
    base = choose_base(parents, config)
    tracking.set_tags(run.run_id, {"merge.base": base, "parent_model": ",".join(parents)})
    get_run_logger().info("merging %s onto %s by %s", ", ".join(parents), base, config.merge.method)
    return parents, base


@task(name="merge-weights", cache_policy=NO_CACHE)
def merge_weights(parents: list[str], base: str, config: FoundryConfig, run: RunContext) -> Path:
    """The merged model.pt and tokenizer.json in the run's folder; refused for mismatched models."""
    from foundry.adapt import merging

    folder = merging.merge_weights(parents, base, config, run.dir / "merged")
    tracking.client().log_dict(run.run_id, merging.recipe(parents, base, config), "merge/recipe.json")
    return folder


@task(name="score-merge", cache_policy=NO_CACHE)
def score_merge(
    merged: Path, parents: list[str], base: str, config: FoundryConfig, run: RunContext
) -> list[HoldoutScore]:
    """The merge beside the base (and each specialist) on every parent's holdout and on the base's."""
    from foundry.adapt.merging import score_holdouts, score_metrics

    scores = score_holdouts(merged, parents, base, config, run.home)
    tracking.log_metrics(run.run_id, score_metrics(scores))
    return scores


@task(name="judge-merge", cache_policy=NO_CACHE)
def judge_merge(scores: list[HoldoutScore], config: FoundryConfig, run: RunContext) -> MergeDecision:
    from foundry.adapt.merge_gate import decide_merge

    decision = decide_merge(scores, config)
    tracking.set_tags(run.run_id, decision.tags())
    get_run_logger().info("merge gate: %s", decision.verdict)
    return decision


@task(name="register-merge", cache_policy=NO_CACHE)
def register_merge(
    merged: Path, parents: list[str], base: str, decision: MergeDecision, config: FoundryConfig, run: RunContext
) -> tuple[str, Promotion]:
    """Publish the merge (all of it or nothing): every parent in `parent_model`, the recipe in a tag and in
    the model card, the base's data version as its own (the holdout its `holdout/*` scores come from)."""
    from foundry.adapt.merge_gate import merge_card
    from foundry.adapt.merging import recipe
    from foundry.registry import versions
    from foundry.serving.package import log_model
    from models.gpt import load_gpt

    base_version = versions.resolve(base)
    name = config.merge.resolved_model_name(base_version.name)
    if withdrawn := versions.recover(name):  # left half-published by a dead run (we hold the promotion lock)
        get_run_logger().warning("withdrew versions %s of %s, left half-published", withdrawn, name)
    made = recipe(parents, base, config)
    uri = log_model(run.run_id, merged / "model.pt", merged / "tokenizer.json")
    run_tags = tracking.client().get_run(run.run_id).data.tags
    tags = {
        "run_id": run.run_id,
        "data_version": base_version.tags.get("data_version", ""),
        "data.remote": base_version.tags.get("data.remote", ""),
        "data.source": f"merge of {', '.join(parents)}",
        # the config is the run's params and config.json, the scores its metrics, the packages its tags
        **tracking.run_git(run_tags),
        **decision.tags(),
        "parent_model": ",".join(parents),
        "merge.base": base,
        "merge.recipe": json.dumps(made),
    }
    card = merge_card(name, made, decision, load_gpt(merged / "model.pt").num_params(), run.run_id)
    outcome = versions.publish(uri, name, run.run_id, tags, decision.make_champion, decision.verdict, card)
    return name, outcome
