"""The one typed config: flow parameters, DVC params.yaml and MLflow params all come from here.

One module per group of sections (`data`, `training`, `evaluation`, `align`, `adapt`; `search` lives with the
search).
Defaults in these files are the source of truth; `params.yaml` is written from them
(`foundry config --defaults --write params.yaml`) and a test keeps the two equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError, field_validator

from foundry.config.adapt import FinetuneConfig, MergeConfig
from foundry.config.align import AlignConfig
from foundry.config.base import _Section
from foundry.config.data import PII_KINDS, DataConfig
from foundry.config.evaluation import EvaluationConfig, RegistryConfig, RetrainConfig
from foundry.config.training import CheckpointConfig, ModelConfig, TokenizerConfig, TrainConfig
from foundry.search.space import SearchConfig, search_fits_config

__all__ = [
    "PII_KINDS",
    "AlignConfig",
    "CheckpointConfig",
    "ConfigError",
    "DataConfig",
    "EvaluationConfig",
    "FinetuneConfig",
    "FoundryConfig",
    "MergeConfig",
    "ModelConfig",
    "RegistryConfig",
    "RetrainConfig",
    "TokenizerConfig",
    "TrainConfig",
    "apply_override",
    "load_config",
    "to_yaml",
    "validate",
]


class FoundryConfig(_Section):
    data: DataConfig = DataConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    registry: RegistryConfig = RegistryConfig()
    retrain: RetrainConfig = RetrainConfig()
    align: AlignConfig = AlignConfig()
    finetune: FinetuneConfig = FinetuneConfig()
    merge: MergeConfig = MergeConfig()
    search: SearchConfig = SearchConfig()  # last: its validator checks the space against the sections above
    _search_fits = field_validator("search")(search_fits_config)

    def flat(self) -> dict[str, Any]:
        """Dotted keys to scalar values, the form MLflow params take."""
        flat: dict[str, Any] = {}
        for section, values in self.model_dump().items():
            for key, value in values.items():
                flat[f"{section}.{key}"] = json.dumps(value) if isinstance(value, list) else value
        return flat


class ConfigError(ValueError):
    """A config that does not validate; the message names key, value and what is allowed."""


def _describe(error: dict[str, Any], raw: dict[str, Any]) -> str:
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        section = error["loc"][0] if len(error["loc"]) > 1 else None
        model = (
            FoundryConfig.model_fields[section].annotation if section in FoundryConfig.model_fields else FoundryConfig
        )
        allowed = ", ".join(model.model_fields)  # type: ignore[union-attr]
        return f"{key}: unknown key; allowed here: {allowed}"
    if error["type"] == "named_key":  # a message that names its own keys (the search space's checks)
        return error["msg"]
    value = error.get("input")
    return f"{key} = {value!r}: {error['msg']}"


def validate(raw: dict[str, Any]) -> FoundryConfig:
    try:
        return FoundryConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(e, raw) for e in exc.errors())
        raise ConfigError(f"invalid config: {problems}") from None


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one `dotted.key=value`; the value is parsed as YAML so numbers and lists keep their type."""
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} is not of the form section.key=value")
    dotted, text = assignment.split("=", 1)
    parts = dotted.strip().split(".")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"override key {dotted!r} must be section.key, e.g. train.max_steps")
    section, key = parts
    raw.setdefault(section, {})
    if not isinstance(raw[section], dict):
        raise ConfigError(f"{section} is a section, not a value")
    raw[section][key] = yaml.safe_load(text) if text.strip() else ""


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> FoundryConfig:
    """Defaults, then the YAML file (if any), then `--set` overrides; validated once at the end."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of sections, not {type(loaded).__name__}")
        raw = loaded
    for assignment in overrides:
        apply_override(raw, assignment)
    return validate(raw)


# Keys whose default is not what a config recorded before the key existed trained with.
PREDATED_DEFAULTS = {("model", "positions"): "learned", ("train", "optimizer"): "adamw"}


def as_recorded(raw: dict[str, Any]) -> dict[str, Any]:
    """A recorded config (a registered version's) with the keys it predates set to what it trained with, so a
    warm start from it builds its architecture and a reproduction follows its recipe."""
    upgraded = json.loads(json.dumps(raw))
    for (section, key), value in PREDATED_DEFAULTS.items():
        if isinstance(upgraded.get(section), dict):
            upgraded[section].setdefault(key, value)
    return upgraded


def to_yaml(config: FoundryConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
