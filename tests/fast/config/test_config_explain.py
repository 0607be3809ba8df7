"""The config explained: descriptions as comments in `foundry config` and params.yaml, `--explain KEY`, and the
variants' `train` overrides (one definition of each key) with old records read in today's shape."""

from __future__ import annotations

from typing import get_args

import pytest
import yaml
from conftest import REPO_ROOT
from pydantic import BaseModel

from foundry.align.start import align_config
from foundry.cli import main
from foundry.config import (
    ConfigError,
    FoundryConfig,
    TrainConfig,
    as_recorded,
    load_config,
    to_commented_yaml,
    validate,
)
from foundry.config.describe import _all_keys, explain
from foundry.training.warm_start import retrain_config


@pytest.fixture
def in_empty_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./params.yaml: the built-in defaults
    return tmp_path


# --- comments ----------------------------------------------------------------------------------


def test_commented_yaml_loads_to_the_same_config(tmp_path):
    config = load_config(REPO_ROOT / "configs" / "tiny_align.yaml", ["data.extensions=[.txt]", "align.train.seed=3"])
    path = tmp_path / "c.yaml"
    path.write_text(to_commented_yaml(config))
    assert load_config(path) == config


def test_params_yaml_carries_each_description_above_its_key():
    lines = (REPO_ROOT / "params.yaml").read_text().splitlines()
    at = lines.index("  learning_rate: 0.0236")  # train.learning_rate
    assert lines[at - 1] == "  # Peak learning rate of AdamW (with muon: of the parameters Muon leaves)."
    assert lines[lines.index("train:") - 1].startswith("# Training from random weights")
    assert max(len(line) for line in lines if line.lstrip().startswith("#")) <= 118


def test_config_defaults_prints_and_writes_the_commented_defaults(in_empty_dir, capsys):
    assert main(["config", "--defaults"]) == 0
    printed = capsys.readouterr().out
    assert printed == to_commented_yaml(FoundryConfig())
    assert main(["config", "--defaults", "--write", "p.yaml"]) == 0
    assert (in_empty_dir / "p.yaml").read_text() == printed
    assert yaml.safe_load(printed) == FoundryConfig().model_dump(mode="json")


# --- --explain ---------------------------------------------------------------------------------


def test_explain_a_key_gives_description_type_default_bounds_and_value(in_empty_dir, capsys):
    assert main(["config", "--explain", "train.learning_rate", "--set", "train.learning_rate=0.01"]) == 0
    out = capsys.readouterr().out
    assert "Peak learning rate of AdamW" in out
    assert "type:    float" in out and "default: 0.0236" in out
    assert "allowed: > 0" in out and "value:   0.01" in out


def test_explain_lists_literal_choices_and_ranges(in_empty_dir, capsys):
    assert main(["config", "--explain", "align.method"]) == 0
    assert "allowed: one of 'sft', 'dpo'" in capsys.readouterr().out
    assert main(["config", "--explain", "align.replay_fraction"]) == 0
    assert "allowed: >= 0; < 1" in capsys.readouterr().out


def test_explain_follows_the_config_file(in_empty_dir, capsys):
    assert (
        main(
            ["config", "--explain", "align.train.max_steps", "--config", str(REPO_ROOT / "configs" / "tiny_align.yaml")]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "default: unset" in out and "value:   30" in out  # unset: the method's recipe decides


def test_explain_a_section_explains_each_of_its_keys(in_empty_dir, capsys):
    assert main(["config", "--explain", "checkpoint"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("checkpoint\n  Checkpoints while training.")
    assert [line for line in out.splitlines() if line.startswith("checkpoint.")] == [
        "checkpoint.every_n_steps",
        "checkpoint.keep_last",
        "checkpoint.async_save",
    ]


def test_explain_an_unknown_key_exits_2_naming_close_keys(in_empty_dir, capsys):
    assert main(["config", "--explain", "train.learnig_rate"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'train.learnig_rate'" in err and "train.learning_rate" in err


# --- variants override `train`, each key defined once ---------------------------------------------


def test_each_train_key_is_defined_once():
    for section in ("retrain", "finetune", "align"):
        own = set(type(getattr(FoundryConfig(), section)).model_fields)
        assert not own & (set(TrainConfig.model_fields) - {"train"}), section


def test_variants_train_their_own_recipe_keys_over_train_by_default():
    config = FoundryConfig()
    retrain, align = config.training_for("retrain"), config.training_for("align")
    assert (retrain.max_steps, retrain.learning_rate, retrain.warmup_steps, retrain.batch_size) == (200, 1e-3, 20, 16)
    assert (align.max_steps, align.learning_rate, align.warmup_steps, align.batch_size) == (2500, 3e-3, 30, 32)
    assert (retrain.precision, retrain.compile, retrain.weight_decay) == ("32-true", False, 0.1)
    assert config.train.weight_decay == 0.2 and config.training_for("finetune").weight_decay == 0.1
    assert align.weight_decay == 0.1
    recipe = {"max_steps", "learning_rate", "warmup_steps", "precision", "compile", "weight_decay"}
    assert retrain.model_dump(exclude=recipe) == config.train.model_dump(exclude=recipe)


def test_an_override_is_checked_as_the_key_it_overrides():
    with pytest.raises(ConfigError, match=r"align\.train\.max_steps = 0"):
        load_config(None, ["align.train.max_steps=0"])
    with pytest.raises(ConfigError, match=r"align\.train\.max_stepz: unknown key"):
        load_config(None, ["align.train.max_stepz=3"])
    with pytest.raises(ConfigError, match="retrain.train with train: optimizer muon needs whole matrices"):
        load_config(None, ["retrain.train.strategy=fsdp"])
    with pytest.raises(ConfigError, match="must be section.key"):
        load_config(None, ["align.data.max_steps=3"])


def test_warm_starts_train_with_the_variant_override(tmp_path):
    from foundry.core.contracts import ParentModel, SourceManifest

    config = load_config(None, ["align.train.max_steps=7", "retrain.train.warmup_steps=2", "train.seed=5"])
    parent = ParentModel(
        uri="models:/p/1",
        weights=str(tmp_path / "model.pt"),
        tokenizer=str(tmp_path / "tokenizer.json"),
        config=config.model_dump(mode="json"),
        source_manifest=SourceManifest(source="s", digest="d", files=0, bytes=0, entries=[]),
    )
    aligned, retrained = align_config(config, parent).train, retrain_config(config, parent).train
    assert (aligned.max_steps, aligned.batch_size, aligned.seed, aligned.init_from) == (7, 32, 5, parent.weights)
    assert (retrained.max_steps, retrained.warmup_steps, retrained.seed) == (200, 2, 5)


def test_a_record_with_the_variants_own_train_keys_reads_as_overrides():
    recorded = FoundryConfig().model_dump(mode="json")
    recorded["retrain"] = {"cron": "0 3 * * 1", "max_steps": 50, "learning_rate": 0.002, "warmup_steps": 5}
    recorded["align"] = {"method": "dpo", "max_steps": 9, "batch_size": 4, "learning_rate": 3e-4, "warmup_steps": 1}
    config = validate(as_recorded(recorded))
    # Nulls for the keys the recipe sets since: the record trained with `train`'s.
    moved = {"max_steps": 50, "learning_rate": 0.002, "warmup_steps": 5}
    moved |= {"precision": None, "compile": None, "weight_decay": None}
    assert config.retrain.train.model_dump() == moved
    assert config.training_for("align").batch_size == 4 and config.align.method == "dpo"
    assert "max_steps" in recorded["align"]  # the record itself is left as it was
    assert as_recorded(FoundryConfig().model_dump(mode="json")) == FoundryConfig().model_dump(mode="json")


# --- every key explained -----------------------------------------------------------------------


def _sections(annotation) -> list[type[BaseModel]]:
    """The models an annotation holds: itself, or the items of a list, an optional..."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _sections(arg)]


def _undescribed(model: type[BaseModel], prefix: str) -> list[str]:
    missing = []
    for name, field in model.model_fields.items():
        if not (field.description or "").strip():
            missing.append(prefix + name)
        for section in _sections(field.annotation):
            missing += _undescribed(section, f"{prefix}{name}.")
    return missing


def test_every_config_key_has_a_description():
    # The description is the comment in params.yaml, the text of --explain and the Prefect form's help.
    assert _undescribed(FoundryConfig, "") == []


def test_explain_answers_for_every_key(in_empty_dir, capsys):
    config, unexplained = FoundryConfig(), []
    for key in _all_keys(config, ""):
        try:
            explain(key, config)
        except Exception as exc:  # noqa: BLE001 - the test names every key that fails, whatever it raises
            unexplained.append(f"{key}: {exc!r}")
    assert unexplained == []
    assert main(["config", "--explain", "search.space"]) == 0  # a list of sections, shown inline
    assert "{key: train.learning_rate, distribution: log_uniform, low: 0.001" in capsys.readouterr().out
