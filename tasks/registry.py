"""Stage E, the registry, as Prefect tasks: what a run builds on, the gate, and publication (with its events)."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from foundry.core import run_tags, workload
from foundry.core.contracts import (
    Candidate,
    ParentData,
    ParentModel,
    Promotion,
    RunContext,
    SourceManifest,
)
from foundry.core.energy import RunEnergy
from foundry.core.model_uri import LoggedModelUri, ModelUri
from foundry.data.manifest import DatasetManifest
from foundry.gates.decision import Decision
from foundry.gates.inputs import AgainstBase, AgainstChampion
from foundry.runtime import tracking


@task(name="champion-data", cache_policy=NO_CACHE)
def champion_data(config: FoundryConfig, run: RunContext) -> ParentData | None:
    """The champion's data version, hydrated: the ledger this run's data builds on (splits stay sticky) and the
    holdout the forgetting guard scores. None without a champion; a registry error stops the run."""
    from foundry.registry import parent as parents

    found = parents.champion_data(config.registry.model_name, run.home)
    if found is not None:
        tracking.set_tags(run.run_id, {run_tags.PARENT_DATA_VERSION: found.data.data_version})
    return found


@task(name="base-data", cache_policy=NO_CACHE)
def base_data(base: ParentModel, run: RunContext) -> ParentData:
    """An image fine-tune's base's data version, hydrated: without a champion of its own, the specialist's data
    builds on it, so the base's classes keep their indices (its head's rows) and no image of the base's holdout,
    or a near copy, is trained on (the forgetting guard scores that holdout)."""
    from foundry.registry import parent as parents
    from foundry.registry import versions

    found = parents.data_of(versions.resolve(base.uri), run.home)
    tracking.set_tags(run.run_id, {run_tags.PARENT_DATA_VERSION: found.data.data_version})
    return found


@task(name="parent", cache_policy=NO_CACHE)
def champion_parent(config: FoundryConfig, home: Path) -> ParentModel:
    """The champion a retrain starts from (downloaded once per version), with its data version hydrated."""
    from foundry.registry.parent import fetch_champion

    return fetch_champion(config.registry.model_name, home)


@task(name="base-model", cache_policy=NO_CACHE)
def base_model(model_uri: str, home: Path) -> ParentModel:
    """Any registered version a fine-tune starts from (downloaded once per version)."""
    from foundry.registry.parent import fetch_version

    return fetch_version(model_uri, home)


@task(name="whats-new", cache_policy=NO_CACHE)
def whats_new(source_manifest: SourceManifest, parent: ParentModel, run: RunContext) -> list[str]:
    """Source files the parent never saw; recorded on the run either way, and announced when there are none."""
    fresh = source_manifest.new_since(parent.source_manifest)
    tracking.log_metrics(run.run_id, {"retrain/new_files": len(fresh)})
    tracking.set_tags(run.run_id, {run_tags.RETRAIN_SKIPPED: str(not fresh).lower()})
    get_run_logger().info("%d new source files since %s", len(fresh), parent.uri)
    if not fresh:
        _emit("foundry.retrain.nothing-new", parent.uri, run, {"source_digest": source_manifest.digest})
    return fresh


@task(name="judge", cache_policy=NO_CACHE)
def judge(config: FoundryConfig, candidate: Candidate, parent: ParentData | None = None) -> Decision:
    """The promotion gate's inputs and verdict: the champion is scored on this same holdout, and both on the
    champion's own holdout (the forgetting guard)."""
    from foundry.registry.gate import decide

    built_on = parent.data.data_version if parent is not None else None
    return _recorded(decide(config, candidate, built_on), candidate)


@task(name="judge-specialist", cache_policy=NO_CACHE)
def judge_specialist(config: FoundryConfig, candidate: Candidate, base: ParentModel) -> Decision:
    """A domain fine-tune's gate: better than its base on the domain holdout, not forgetting the base's (bits
    per byte for a language model, holdout accuracy for an image classifier)."""
    from foundry.specialists.gate import decide_specialist

    return _recorded(decide_specialist(config, candidate, base.uri), candidate)


def _recorded(decision: Decision, candidate: Candidate) -> Decision:
    """The decision on the run: the summary table, the verdict tags and the gate's scores (`gate_scores`)."""
    run, gate = candidate.run, decision.inputs
    table = workload.for_data(candidate.data_dir).summary_table(candidate.metrics, decision)
    tracking.client().log_table(run.run_id, table, "evaluation/summary.json")
    tracking.set_tags(run.run_id, decision.run_tags())
    scores = gate_scores(gate)
    if scores:
        tracking.log_metrics(run.run_id, scores)
    return decision


def gate_scores(gate: AgainstChampion | AgainstBase) -> dict[str, float]:
    """A pretraining or specialist gate's figures by the measure it compares (`gate/champion_bits_per_byte`,
    `gate/old_holdout_accuracy`...): the champion's (for a fine-tune, its base's), a specialist's own champion's
    on the domain holdout, and the forgetting guard's, both on the champion's own holdout."""
    measure, scores = gate.measure.name, {}
    if gate.champion is not None:
        scores[f"gate/champion_{measure}"] = gate.champion
    if getattr(gate, f"incumbent_{measure}", None) is not None:  # a specialist's own champion
        scores[f"gate/incumbent_{measure}"] = getattr(gate, f"incumbent_{measure}")
    if gate.old_holdout is not None:
        old = gate.old_holdout
        scores |= {
            f"gate/old_holdout_{measure}": old.challenger,
            f"gate/champion_old_holdout_{measure}": old.champion,
            "gate/old_holdout_regression": old.regression,
        }
    return scores


@task(name="register", cache_policy=NO_CACHE)
def register(config: FoundryConfig, candidate: Candidate, decision: Decision, parent: str = "") -> Promotion:
    """Log the pyfunc model and publish it: a version with lineage, metrics, gate tags and a model card,
    `challenger`, and `champion` when the gate passed and auto-promotion is on; all of it or nothing."""
    from foundry.registry import versions
    from foundry.registry.lineage import version_tags

    c, run, name = candidate, candidate.run, config.registry.model_name
    manifest = DatasetManifest.read(c.data_dir)
    served = workload.for_manifest(manifest)  # its pyfunc: text in and out, or images in and labels out
    uri = served.log_served_model(run.run_id, c.checkpoint, c.tokenizer, config)
    tracking.link_metrics(run.run_id, sorted(c.metrics.as_mlflow()), model_id=LoggedModelUri.parse(uri).model_id)
    git = tracking.run_git(tracking.client().get_run(run.run_id).data.tags)
    tags = version_tags(config, run.run_id, c.data, manifest.source_digest, decision, git, parent)
    card = served.model_card(config, c, decision, tags) + RunEnergy.read(run.dir).card_section()
    made, verdict = decision.make_champion, decision.verdict
    outcome = versions.publish(uri, name, run.run_id, tags.as_tags(), made, verdict, description=card)
    payload = {"verdict": decision.verdict, **decision.tags(), **served.event_scores(c.metrics)}
    _emit(event_name(outcome, decision), str(ModelUri(name=name, version=outcome.version)), run, payload)
    return outcome


def event_name(outcome: Promotion, decision: Decision) -> str:
    """promoted; refused by the gate; or passed but left for a reviewer (`registry.auto_promote: false`)."""
    if outcome.promoted:
        return "foundry.model.promoted"
    return "foundry.model.refused" if not decision.passed else "foundry.model.awaiting-review"


def _emit(event: str, model_uri: str, run: RunContext, payload: dict) -> None:
    """A Prefect event about a registered model (its URI is the resource), for automations to act on."""
    from prefect.events import emit_event

    uri = ModelUri.parse(model_uri)
    name, version = uri.name, uri.version
    emit_event(
        event=event,
        resource={
            "prefect.resource.id": model_uri,
            "prefect.resource.name": f"{name} v{version}",
            "foundry.model.name": name,
            "foundry.model.version": version,
        },
        related=[{"prefect.resource.id": f"mlflow.run.{run.run_id}", "prefect.resource.role": "mlflow-run"}],
        payload=payload,
    )
