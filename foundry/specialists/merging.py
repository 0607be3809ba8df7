"""Merging registered specialists: their common ancestor, the merged weights, and the holdouts they are scored on.

No training: the parents are downloaded (once per version), checked to share architecture, shapes and
tokenizer (`models.merge.check_mergeable`), and merged onto the base they were fine-tuned from.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.core.model_uri import ModelUri
from foundry.gates.inputs import MergeInputs
from foundry.registry import tags as registry_tags
from foundry.registry import versions
from foundry.specialists.contracts import HoldoutScore
from models.merge import Mergeable, MergeRefused, check_mergeable, merge


def canonical(model_uri: str) -> str:
    """`models:/NAME@ALIAS` or `models:/NAME/VERSION` as `models:/NAME/VERSION`."""
    return str(ModelUri.of(versions.resolve(model_uri)))


def parents_of(version) -> list[str]:
    """The versions a registered version was built from: one for a fine-tune, several for a merge."""
    return [str(uri) for uri in registry_tags.parent_models(version)]  # checked: a bad tag stops the merge


def ancestry(model_uri: str) -> list[str]:
    """The version itself, then its ancestors, nearest first (breadth first through every parent)."""
    order: list[str] = []
    queue = [canonical(model_uri)]
    while queue:
        current = queue.pop(0)
        if current not in order:
            order.append(current)
            queue += parents_of(versions.resolve(current))
    return order


def common_ancestor(model_uris: list[str]) -> str | None:
    """The nearest version (of the first model's ancestry) that every model descends from, or None."""
    first, *others = [ancestry(uri) for uri in model_uris]
    return next((uri for uri in first if all(uri in chain for chain in others)), None)


def choose_base(model_uris: list[str], config: FoundryConfig) -> str:
    """`merge.base`, which must be the models' common ancestor unless `merge.force`; by default that ancestor."""
    found = common_ancestor(model_uris)
    named = ", ".join(model_uris)
    if not config.merge.base:
        if found is None:
            raise MergeRefused(
                f"{named} share no ancestor in their lineage (parent_model tags): a merge adds each model's "
                "change from the base it was fine-tuned from, so name that base with --base (and --force)"
            )
        return found
    base = canonical(config.merge.base)
    if base != found and not config.merge.force:
        raise MergeRefused(
            f"base {base} is not the common ancestor recorded in the lineage of {named} ({found or 'none'}): task "
            f"vectors taken from another model carry its differences too; use {found or 'their base'} or --force"
        )
    return base


def load_mergeable(model_uri: str, home: Path) -> tuple[Mergeable, Path]:
    """A registered version as a merge input, and its artifacts folder (model.pt, tokenizer.json)."""
    import torch

    version = versions.resolve(model_uri)
    artifacts = versions.download(version, home)
    saved = torch.load(artifacts / "model.pt", map_location="cpu", weights_only=True)
    digest = hashlib.sha256((artifacts / "tokenizer.json").read_bytes()).hexdigest()
    label = str(ModelUri.of(version))
    return Mergeable(label, saved["model_args"], saved["state_dict"], digest), artifacts


def merge_weights(model_uris: list[str], base_uri: str, config: FoundryConfig, out: Path) -> Path:
    """The merged model.pt, written to `out` (with the base's tokenizer beside it); refused when the models
    differ in architecture, shapes or tokenizer. Returns the folder."""
    import shutil

    from foundry.training.trainer import save_model

    base, base_files = load_mergeable(base_uri, out.parent)
    parents = [load_mergeable(uri, out.parent)[0] for uri in model_uris]
    check_mergeable([base, *parents])
    m = config.merge
    state = merge(
        m.method,
        [p.state for p in parents],
        base=base.state,
        weights=m.weights or None,
        density=m.density,
        lam=m.scale,
        seed=m.seed,
    )
    out.mkdir(parents=True, exist_ok=True)
    recorded = registry_tags.recorded_data(versions.resolve(base_uri))
    base_data = "" if recorded is None else recorded.data_version
    save_model(out / "model.pt", base.model_args, state, config, base_data)
    shutil.copyfile(base_files / "tokenizer.json", out / "tokenizer.json")
    return out


def recipe(model_uris: list[str], base_uri: str, config: FoundryConfig) -> dict:
    """What the merge did, enough to do it again: recorded as a tag and in the model card."""
    m = config.merge
    weights = m.weights or [1.0] * len(model_uris)
    return {
        "method": m.method,
        "base": base_uri,
        "models": model_uris,
        "weights": weights,
        "density": m.density,
        "scale": m.scale,
        "seed": m.seed,
    }


def score_holdouts(merged: Path, model_uris: list[str], base_uri: str, config: FoundryConfig, home: Path):
    """The merge and the base on each parent's holdout (and the specialist on its own), then on the base's."""
    from foundry.core.workload import for_data
    from foundry.registry.parent import data_of

    base_version = versions.resolve(base_uri)
    base_files = versions.download(base_version, home)
    cache: dict[tuple[str, str], float] = {}

    def bpb(name: str, weights: Path, tokenizer: Path, holdout) -> float:
        key = (name, holdout.data.data_version)
        if key not in cache:
            cache[key] = for_data(holdout.dir).gate_score(weights, tokenizer, holdout.dir, config)  # bits per byte
        return cache[key]

    scores = []
    for uri in [*model_uris, base_uri]:
        version = versions.resolve(uri)
        holdout = data_of(version, home)
        own = None
        if uri != base_uri:  # re-scored rather than read from its tags: the same evaluation settings for all
            files = versions.download(version, home)
            own = bpb(uri, files / "model.pt", files / "tokenizer.json", holdout)
        scores.append(
            HoldoutScore(
                holdout_of=uri,
                data_version=holdout.data.data_version,
                merged_bits_per_byte=bpb("merged", merged / "model.pt", merged / "tokenizer.json", holdout),
                base_bits_per_byte=bpb(base_uri, base_files / "model.pt", base_files / "tokenizer.json", holdout),
                specialist_bits_per_byte=own,
            )
        )
    return scores


def score_metrics(scores: list[HoldoutScore]) -> dict[str, float]:
    """The scores as MLflow metrics, one group per holdout (named after the model it belongs to); the merge's
    own `holdout/bits_per_byte` is its score on the base's holdout (the last), as for the base itself."""
    metrics = HoldoutMetrics(bits_per_byte=scores[-1].merged_bits_per_byte).as_mlflow()
    for s in scores:
        uri = ModelUri.parse(s.holdout_of)
        group = f"holdout.{uri.name}_v{uri.version}"
        metrics[f"{group}/merged_bits_per_byte"] = s.merged_bits_per_byte
        metrics[f"{group}/base_bits_per_byte"] = s.base_bits_per_byte
        if s.specialist_bits_per_byte is not None:
            metrics[f"{group}/specialist_bits_per_byte"] = s.specialist_bits_per_byte
    return metrics


def merge_inputs(scores: list[HoldoutScore], config: FoundryConfig) -> MergeInputs:
    """The merge gate's inputs: the scores, `merge.max_gap` and whether a pass promotes (`foundry.gates.merge`)."""
    return MergeInputs(scores=scores, max_gap=config.merge.max_gap, auto_promote=config.registry.auto_promote)
