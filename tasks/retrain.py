"""Retraining: what is new since the champion's data, and the config that fine-tunes the champion."""

from __future__ import annotations

import json
from pathlib import Path

from foundry.config import FoundryConfig, validate
from tasks import registry


class NoChampion(RuntimeError):
    """Retraining starts from a champion; there is none yet."""


def fetch_parent(config: FoundryConfig, home: Path) -> dict:
    """The champion's version, its weights, tokenizer, recorded config and source manifest."""
    import mlflow

    champion = registry.champion(config.registry.model_name)
    if champion is None:
        raise NoChampion(f"{config.registry.model_name} has no champion to retrain; run the train pipeline first")
    artifacts = registry.download(champion, home)
    manifest = mlflow.artifacts.load_text(f"runs:/{champion.run_id}/data/source_manifest.json")
    return {
        "model": f"models:/{champion.name}/{champion.version}", "weights": str(artifacts / "model.pt"),
        "tokenizer": str(artifacts / "tokenizer.json"), "config": json.loads(champion.tags["config"]),
        "source_manifest": json.loads(manifest),
    }


def new_files(current: dict, previous: dict) -> list[str]:
    """Files whose content the champion's data did not have (by sha256, wherever they sit)."""
    seen = {entry["sha256"] for entry in previous["entries"]}
    return [entry["name"] for entry in current["entries"] if entry["sha256"] not in seen]


def fine_tune_config(config: FoundryConfig, parent: dict) -> FoundryConfig:
    """This run's data settings with the parent's model shape and tokenizer, started from its weights."""
    raw = config.model_dump(mode="json")
    raw["model"] = parent["config"]["model"]
    raw["tokenizer"] = {**parent["config"]["tokenizer"], "from_file": parent["tokenizer"]}
    r = config.retrain
    raw["train"].update(init_from=parent["weights"], max_steps=r.max_steps, learning_rate=r.learning_rate,
                        warmup_steps=r.warmup_steps)
    return validate(raw)
