"""Stage E, the registry, as Prefect tasks: the parent a run starts from, the gate, register, promote."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry import tracking
from foundry.config import FoundryConfig
from foundry.contracts import DataVersion, GateDecision, ParentModel, Promotion, RunContext, SourceManifest


@task(name="parent", cache_policy=NO_CACHE)
def champion_parent(config: FoundryConfig, home: Path) -> ParentModel:
    """The champion a run starts from (downloaded once per version)."""
    from foundry.registry.parent import fetch_champion

    return fetch_champion(config.registry.model_name, home)


@task(name="whats-new", cache_policy=NO_CACHE)
def whats_new(source_manifest: SourceManifest, parent: ParentModel, run: RunContext) -> list[str]:
    """Source files the parent never saw; recorded on the run either way."""
    fresh = source_manifest.new_since(parent.source_manifest)
    tracking.log_metrics(run.run_id, {"retrain/new_files": len(fresh)})
    tracking.set_tags(run.run_id, {"retrain.skipped": str(not fresh).lower()})
    get_run_logger().info("%d new source files since %s", len(fresh), parent.uri)
    return fresh


@task(name="judge", cache_policy=NO_CACHE)
def judge(config: FoundryConfig, metrics: dict, data_dir: Path, data: DataVersion, run: RunContext) -> GateDecision:
    """The promotion gate's inputs and verdict: the champion is scored on this same holdout."""
    from foundry.evaluation.report import summary_table
    from foundry.registry.gate import decide

    decision = decide(config, metrics, data_dir, data, run.home)
    table = summary_table(metrics, decision.champion_bits_per_byte)
    tracking.client().log_table(run.run_id, table, "evaluation/summary.json")
    tracking.set_tags(run.run_id, {"gate.verdict": decision.verdict, "gate.passed": str(decision.passed).lower()})
    return decision


@task(name="register", cache_policy=NO_CACHE)
def register(
    config: FoundryConfig,
    checkpoint: Path,
    data_dir: Path,
    data: DataVersion,
    metrics: dict,
    decision: GateDecision,
    run: RunContext,
    parent: str = "",
) -> str:
    """Log the pyfunc model and register it, with lineage, metrics, gate tags and a model card; all or nothing."""
    from foundry.evaluation.report import model_card
    from foundry.registry import versions
    from foundry.registry.lineage import version_tags
    from foundry.serving.package import log_model
    from models.gpt import load_gpt

    uri = log_model(run.run_id, checkpoint, data_dir / "tokenizer.json")
    tracking.link_metrics(run.run_id, sorted(metrics), model_id=uri.removeprefix("models:/"))
    git = tracking.run_git(tracking.client().get_run(run.run_id).data.tags)
    manifest = json.loads((data_dir / "manifest.json").read_text())
    card = model_card(config, manifest, data, metrics, decision, load_gpt(checkpoint).num_params(), run.run_id, git)
    tags = version_tags(config, run.run_id, data, manifest["source_digest"], decision, git, parent)
    return versions.register(uri, config.registry.model_name, run.run_id, tags, description=card)


@task(name="promote", cache_policy=NO_CACHE)
def promote(config: FoundryConfig, version: str, decision: GateDecision) -> Promotion:
    """`challenger` always; `champion` when the gate says so."""
    from foundry.registry import versions

    return versions.promote(config.registry.model_name, version, decision.make_champion, decision.verdict)
