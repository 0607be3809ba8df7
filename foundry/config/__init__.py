"""The one typed config: flow parameters, DVC params.yaml and MLflow params all come from here.

One module per group of sections (`data`, `training`, `evaluation`, `serving`, `align`, `adapt`, `energy`,
`search`); `base` is what every section shares, `describe` explains the config to people (comments, `--explain`),
`variants` derives a config from a config (another source, a warm start, a trial's values) and validates it again.
`FoundryConfig` is the sections every workload shares with each registered workload's own in its place
(`foundry.core.registrations.Section`: `image` and `vision` are the image workload's, in `foundry.vision.config`), built by
`foundry.core.extended`. Defaults in these files are the source of truth; `params.yaml` is written from them
(`foundry config --defaults --write params.yaml`) and a test keeps the two equal.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from foundry.config import variants
from foundry.config.adapt import FinetuneConfig, MergeConfig
from foundry.config.align import AlignConfig, SftTrain
from foundry.config.base import _Section
from foundry.config.data import PII_KINDS, DataConfig
from foundry.config.describe import commented_yaml
from foundry.config.energy import EnergyConfig
from foundry.config.evaluation import EvaluationConfig, RegistryConfig, RetrainConfig
from foundry.config.search import SearchConfig, search_fits_config
from foundry.config.serving import ServingConfig
from foundry.config.training import CheckpointConfig, ModelConfig, TokenizerConfig, TrainConfig
from foundry.core import registrations
from foundry.core.extended import Added, extended, imported
from foundry.core.redact import redact_text, redact_url
from foundry.core.registrations import sections_read

if TYPE_CHECKING:
    from foundry.core.contracts import ParentModel

__all__ = [
    "PII_KINDS",
    "AlignConfig",
    "CheckpointConfig",
    "ConfigError",
    "DataConfig",
    "EnergyConfig",
    "EvaluationConfig",
    "FinetuneConfig",
    "FoundryConfig",
    "MergeConfig",
    "ModelConfig",
    "RegistryConfig",
    "RetrainConfig",
    "ServingConfig",
    "TokenizerConfig",
    "TrainConfig",
    "apply_override",
    "load_config",
    "to_commented_yaml",
    "to_yaml",
    "validate",
]


class _SharedSections(_Section):
    """The sections every workload's runs read (or that no workload's own): `FoundryConfig`'s fields, with the
    registered workloads' own sections in their places (`foundry.core.extended`)."""

    data: DataConfig = Field(
        DataConfig(), description="Where the text (or images) come from, how they are cleaned and split."
    )
    tokenizer: TokenizerConfig = Field(TokenizerConfig(), description="The byte-level BPE tokenizer.")
    model: ModelConfig = Field(ModelConfig(), description="The GPT's shape.")
    train: TrainConfig = Field(
        TrainConfig(),
        description="Training from random weights, and the base that retrain, finetune and align override.",
    )
    checkpoint: CheckpointConfig = Field(CheckpointConfig(), description="Checkpoints while training.")
    evaluation: EvaluationConfig = Field(
        EvaluationConfig(), description="Holdout scoring, generations and the gate's thresholds."
    )
    registry: RegistryConfig = Field(RegistryConfig(), description="The MLflow model registry.")
    serving: ServingConfig = Field(
        ServingConfig(), description="Bounds of one request to a registered version, saved with each version."
    )
    retrain: RetrainConfig = Field(
        RetrainConfig(), description="`foundry retrain`: fine-tune the champion on what is new, on a schedule."
    )
    align: AlignConfig = Field(
        AlignConfig(),
        description="`foundry align MODEL_URI`: instruction tuning (sft) or preference optimisation (dpo) of a "
        "registered version.",
    )
    finetune: FinetuneConfig = Field(
        FinetuneConfig(), description="`foundry finetune`: specialise a registered model on a domain's text."
    )
    merge: MergeConfig = Field(MergeConfig(), description="`foundry merge`: merge specialists into one model.")
    energy: EnergyConfig = Field(
        EnergyConfig(),
        description="The energy each run records per stage: the estimate's watts per core where no counter is "
        "readable, the grid's CO2 per kWh.",
    )
    # last: its validator checks the space against the sections above
    search: SearchConfig = Field(SearchConfig(), description="`foundry search`: a hyperparameter study (Optuna).")


class _ConfigRules(_Section):
    """`FoundryConfig`'s rules and methods; its fields are `_SharedSections`' and the workloads' sections."""

    @field_validator("search", check_fields=False)
    @classmethod
    def _search_fits(cls, search: SearchConfig, info: ValidationInfo) -> SearchConfig:
        # A section that failed is missing from `info.data`: its own error names the bad value, and a
        # dimension on it is not checked against it (it would read as "not a config key").
        failed = set(cls.model_fields) - set(info.data) - {"search"}
        return search_fits_config(search, info, skip=failed)

    @model_validator(mode="after")
    def _variants_train(self) -> _ConfigRules:
        # An override is checked with the `train` it applies to (fsdp with muon...) when the config loads, not
        # when its flow starts; alignment's under both methods' recipes, whichever align.method is.
        trainings = {
            "retrain.train": lambda: self.training_for("retrain"),
            "finetune.train": lambda: self.training_for("finetune"),
            "align.train over align.sft_train": lambda: self.align.training(self.train, "sft"),
            "align.train over align.dpo_train": lambda: self.align.training(self.train, "dpo"),
        }
        for variant, training in trainings.items():
            try:
                training()
            except ValidationError as exc:
                problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
                raise PydanticCustomError("named_key", f"{variant} with train: {problems}") from None
        return self

    @model_validator(mode="after")
    def _sections_fit(self) -> _ConfigRules:
        # A value the run cannot train with (an image size the classifier cannot take) fails here, not in training;
        # only the sections a run of this modality reads are asked (`foundry.core.registrations`).
        for name in sections_read(self.data.modality):
            if problem := getattr(self, name).misfit(self):
                raise PydanticCustomError("named_key", problem)
        return self

    def training_for(self, variant: Literal["retrain", "finetune", "align"]) -> TrainConfig:
        """The `train` section a variant trains with: `train`, with the variant's `train` keys in place (for
        alignment, align.method's recipe first, then `align.train`'s keys: `AlignConfig.training`)."""
        if variant == "align":
            return self.align.training(self.train)
        return getattr(self, variant).train.applied_to(self.train)

    def train_keys_not_taken(self, variant: Literal["retrain", "finetune", "align"]) -> list[tuple[str, Any, str, Any]]:
        """(key, `train`'s value, the variant's key, its value) for each `train` key set away from its default that
        the variant's recipe replaces with the recipe's own default. A variant's key set to another value is a
        choice, and left out; one set to its recipe's value cannot be told from one left alone (params.yaml writes
        every key out), and is named."""
        if variant == "align":
            method = self.align.method
            sections = [("align.train", self.align.train), (f"align.{method}_train", self.align.recipe_of(method))]
        else:
            sections = [(f"{variant}.train", getattr(self, variant).train)]
        not_taken = []
        for key, field in TrainConfig.model_fields.items():
            value = getattr(self.train, key)
            if key == "init_from" or value == field.default:
                continue
            setting = _first_setting(sections, key)
            if setting and setting[1] != value and setting[1] == type(setting[2]).model_fields[key].default:
                not_taken.append((key, value, setting[0], setting[1]))
        return not_taken

    # Configs derived from this one, validated again as a whole (`foundry.config.variants`).
    def with_sections(self, **sections: _Section | dict[str, Any]) -> FoundryConfig:
        """This config with whole sections in place of its own (typed, or a record's values)."""
        return variants.with_sections(self, **sections)

    def with_keys(self, **sections: dict[str, Any]) -> FoundryConfig:
        """This config with the given keys of each named section set: `with_keys(train={"max_steps": 9})`."""
        return variants.with_keys(self, **sections)

    def reading(self, source: str, **data: Any) -> FoundryConfig:
        """This config reading `source` alone, with any other `data` keys given."""
        return variants.reading(self, source, **data)

    def registering_as(self, name: str) -> FoundryConfig:
        """This config registering its versions as `name`."""
        return variants.registering_as(self, name)

    def accumulating(self, steps: int) -> FoundryConfig:
        """This config accumulating gradients over `steps` micro-batches."""
        return variants.accumulating(self, steps)

    def tokenizer_from(self, path: str | Path) -> FoundryConfig:
        """This config tokenizing with the tokenizer file at `path`."""
        return variants.tokenizer_from(self, path)

    def initialised_from(self, parent: ParentModel) -> FoundryConfig:
        """This config starting from `parent`'s weights and tokenizer, its own model and training settings kept."""
        return variants.initialised_from(self, parent)

    def warm_started_from(
        self, parent: ParentModel, train: TrainConfig, **sections: _Section | dict[str, Any]
    ) -> FoundryConfig:
        """The parent's model shape and tokenizer, trained with `train` from its weights; `sections` in place."""
        return variants.warm_started_from(self, parent, train, **sections)

    def flat(self) -> dict[str, Any]:
        """Dotted keys to scalar values, the form MLflow params take; a nested section's keys get its name too
        (`align.train.max_steps`)."""
        return _flat(self.model_dump(), "")


def _workload_sections() -> list[Added]:
    """Each registered workload's own sections as config fields, in their places; each defaults to its class's
    defaults."""
    added = []
    for section in registrations.sections():
        model = imported(section.model)
        if not (isinstance(model, type) and issubclass(model, _Section)):
            raise TypeError(f"{section.model} is not a config section: derive it from ConfigSection (foundry.core)")
        added.append(Added(section.name, model, Field(model(), description=section.description), section.after))
    return added


# The one typed config: the shared sections with each registered workload's own in the place it names, else before
# `search` (last: its validator checks the space against the sections above it).
FoundryConfig = extended("FoundryConfig", _ConfigRules, _SharedSections, _workload_sections(), "search", doc=None)


def _first_setting(sections: list[tuple[str, Any]], key: str) -> tuple[str, Any, Any] | None:
    """(the dotted key, its value, its section) of the first of `sections` that sets `key`: the one a variant takes."""
    for name, section in sections:
        if getattr(section, key) is not None:
            return f"{name}.{key}", getattr(section, key), section
    return None


def _flat(values: dict[str, Any], prefix: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        elif isinstance(value, str):  # a config built without validation may still hold a credential
            flat[prefix + key] = redact_url(value)
        else:
            flat[prefix + key] = json.dumps(value) if isinstance(value, list) else value
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
        gone = RUNTIME_KEYS.get(tuple(error["loc"]))
        return f"{key}: no longer a setting: {gone}" if gone else f"{key}: unknown key; allowed here: {allowed}"
    if error["type"] == "named_key":  # a message that names its own keys (the search space's checks)
        return error["msg"]
    value = error.get("input")
    shown = redact_text(repr(value)) if isinstance(value, str) else repr(value)  # a bad URL may hold a password
    return f"{key} = {shown}: {error['msg']}"


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
    # section.key, or a variant's override of a `train` key: retrain.train.max_steps, align.dpo_train.max_steps
    if len(parts) not in (2, 3) or not all(parts) or (len(parts) == 3 and parts[1] not in TRAIN_OVERRIDES):
        raise ConfigError(
            f"override key {dotted!r} must be section.key, e.g. train.max_steps (or retrain.train.KEY, "
            "finetune.train.KEY, align.train.KEY, align.sft_train.KEY, align.dpo_train.KEY)"
        )
    *sections, key = parts
    for depth, section in enumerate(sections):
        raw = raw.setdefault(section, {})
        if not isinstance(raw, dict):
            raise ConfigError(f"{'.'.join(sections[: depth + 1])} is a section, not a value")
    raw[key] = yaml.safe_load(text) if text.strip() else ""


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


# The sections inside a section that override `train`'s keys (`retrain.train`, `align.sft_train`...).
TRAIN_OVERRIDES = ("train", "sft_train", "dpo_train")
# Before the methods' recipes `align.train` alone applied over `train`: its null keys meant `train`'s values.
_NO_RECIPE = {key: None for key in SftTrain.model_fields}
# Keys whose default is not what a config recorded before the key existed trained with.
PREDATED_DEFAULTS = {
    ("model", "positions"): "learned",
    ("train", "optimizer"): "adamw",
    ("train", "precision"): "auto",
    ("train", "compile"): False,
    ("train", "batch_ramp_steps"): 0,
    ("train", "average_last"): 0.0,
    ("align", "replay_fraction"): 0.0,
    ("evaluation", "window_overlap"): 0.0,
    ("align", "sft_train"): _NO_RECIPE,
    ("align", "dpo_train"): _NO_RECIPE,
}
# Keys a recipe (a variant's `train` override) sets now and a record made before kept `train`'s values of.
RECIPE_PREDATED = {
    ("retrain", "train"): ("precision", "compile", "weight_decay"),
    ("finetune", "train"): ("learning_rate", "weight_decay"),
} | {("align", recipe): ("precision", "compile", "weight_decay") for recipe in ("sft_train", "dpo_train")}
# Keys that moved: a variant's own copies of `train` keys, now its `train` override.
MOVED_TO_OVERRIDE = {
    "retrain": ("max_steps", "learning_rate", "warmup_steps"),
    "align": ("max_steps", "batch_size", "learning_rate", "warmup_steps"),
}
# Keys that held what a flow found at run time, now typed values beside the config: a record's value is
# dropped, a config file that still sets one is told why it is refused.
RUNTIME_KEYS = {
    ("align", "replay_from"): "the align flow hydrates the pretraining data it replays itself (a "
    "foundry.core.contracts.Replay, logged as the tag align.replay_source); delete the line",
}


def as_recorded(raw: dict[str, Any]) -> dict[str, Any]:
    """A recorded config (a registered version's) in today's shape: keys it predates set to what it trained
    with, so a warm start from it builds its architecture and a reproduction follows its recipe; keys that
    moved, moved (its `train` holds what it trained with either way); run-time state it held, dropped."""
    upgraded = json.loads(json.dumps(raw))
    for (section, key), value in PREDATED_DEFAULTS.items():
        if isinstance(upgraded.get(section), dict):
            upgraded[section].setdefault(key, copy.deepcopy(value))
    for section, keys in MOVED_TO_OVERRIDE.items():
        values = upgraded.get(section)
        if isinstance(values, dict) and any(key in values for key in keys):
            moved = {key: values.pop(key) for key in keys if key in values}
            values["train"] = {**moved, **values.get("train", {})}
    for (section, recipe), keys in RECIPE_PREDATED.items():
        if isinstance(upgraded.get(section), dict) and isinstance(upgraded[section].setdefault(recipe, {}), dict):
            upgraded[section][recipe].update({key: None for key in keys if key not in upgraded[section][recipe]})
    for section, key in RUNTIME_KEYS:
        if isinstance(upgraded.get(section), dict):
            upgraded[section].pop(key, None)
    return upgraded


def to_yaml(config: FoundryConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def to_commented_yaml(config: FoundryConfig) -> str:
    """`to_yaml` with each section's and key's description as a comment above it: params.yaml's form."""
    return commented_yaml(config)
