"""foundry.config: defaults, the params.yaml twin, overrides and the error messages users see."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import REPO_ROOT
from pydantic import TypeAdapter

from foundry.config import (
    ConfigError,
    DataConfig,
    FoundryConfig,
    apply_override,
    as_recorded,
    load_config,
    to_commented_yaml,
    to_yaml,
    validate,
)

# --- defaults and the single source of truth -------------------------------------------------


def test_defaults_validate_and_round_trip():
    config = FoundryConfig()
    again = validate(config.model_dump())
    assert again == config
    assert config.model.n_embd % config.model.n_head == 0
    assert config.data.min_chars <= config.data.max_chars


def test_params_yaml_equals_defaults():
    # Single source of truth: params.yaml is written from FoundryConfig's defaults (and their descriptions),
    # byte for byte, by `foundry config --defaults --write params.yaml`.
    assert (REPO_ROOT / "params.yaml").read_text() == to_commented_yaml(FoundryConfig())


def test_params_yaml_loads_to_defaults():
    assert load_config(REPO_ROOT / "params.yaml") == FoundryConfig()


def test_tiny_yaml_loads_with_its_values_and_defaults_elsewhere():
    config = load_config(REPO_ROOT / "configs" / "tiny.yaml")
    raw = yaml.safe_load((REPO_ROOT / "configs" / "tiny.yaml").read_text())
    for section, values in raw.items():
        for key, value in values.items():
            # The file's value as its section reads it: lists of dimensions (search.space) become models.
            expected = TypeAdapter(type(getattr(config, section)).model_fields[key].annotation).validate_python(value)
            assert getattr(getattr(config, section), key) == expected, f"{section}.{key}"
    # Keys the file leaves out keep their defaults.
    assert config.data.min_chars == DataConfig().min_chars
    assert config.train.grad_clip == FoundryConfig().train.grad_clip


def test_to_yaml_round_trips_through_load(tmp_path):
    config = load_config(None, ["train.max_steps=7", "data.extensions=[.txt]"])
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml(config))
    assert load_config(path) == config


# --- overrides -------------------------------------------------------------------------------


def test_overrides_keep_types():
    config = load_config(
        None,
        [
            "train.max_steps=12",
            "train.learning_rate=0.01",
            "data.extensions=[.txt, .md]",
            "registry.auto_promote=false",
            "data.source=/some/where",
        ],
    )
    assert config.train.max_steps == 12 and type(config.train.max_steps) is int
    assert config.train.learning_rate == 0.01 and type(config.train.learning_rate) is float
    assert config.data.extensions == [".txt", ".md"]
    assert config.registry.auto_promote is False
    assert config.data.source == "/some/where"


def test_override_value_may_contain_equals_sign():
    config = load_config(None, ["data.source=http://h/get?a=b"])
    assert config.data.source == "http://h/get?a=b"


def test_overrides_apply_after_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  max_steps: 5\n  batch_size: 3\n")
    config = load_config(path, ["train.max_steps=9"])
    assert config.train.max_steps == 9
    assert config.train.batch_size == 3


def test_apply_override_creates_missing_section():
    raw: dict = {}
    apply_override(raw, "model.n_layer=4")
    assert raw == {"model": {"n_layer": 4}}


def test_empty_override_value_is_empty_string():
    raw: dict = {}
    apply_override(raw, "data.remote=")
    assert raw == {"data": {"remote": ""}}
    assert validate(raw).data.remote == ""


# --- errors name the key and the value --------------------------------------------------------


def test_unknown_key_lists_allowed_keys():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["train.max_stepz=3"])
    message = str(info.value)
    assert "train.max_stepz" in message and "unknown key" in message
    for allowed in ("max_steps", "batch_size", "num_nodes", "devices"):
        assert allowed in message


def test_unknown_section_lists_sections():
    with pytest.raises(ConfigError) as info:
        validate({"trian": {"max_steps": 3}})
    message = str(info.value)
    assert "trian" in message
    for section in ("data", "tokenizer", "model", "train", "registry"):
        assert section in message


def test_wrong_type_names_key_and_value():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["train.max_steps=lots"])
    message = str(info.value)
    assert "train.max_steps" in message and "'lots'" in message


def test_out_of_range_names_key_and_value():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["data.holdout_fraction=0.9"])
    assert "data.holdout_fraction" in str(info.value) and "0.9" in str(info.value)


def test_literal_names_key_and_value():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["data.on_error=ignore"])
    assert "data.on_error" in str(info.value) and "ignore" in str(info.value)


def test_heads_must_divide_width():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["model.n_embd=100", "model.n_head=3"])
    message = str(info.value)
    assert "n_embd (100)" in message and "n_head (3)" in message


def test_rotary_positions_need_an_even_head_size():
    with pytest.raises(ConfigError, match="positions rotary needs an even head size; n_embd / n_head is 15"):
        load_config(None, ["model.n_embd=45", "model.n_head=3"])
    load_config(None, ["model.n_embd=45", "model.n_head=3", "model.positions=learned"])  # a table has no such need


def test_muon_is_refused_with_fsdp_and_left_to_warm_starts():
    with pytest.raises(ConfigError, match="optimizer muon needs whole matrices; FSDP shards them"):
        load_config(None, ["train.strategy=fsdp", "train.accelerator=gpu"])
    assert load_config(None, ["train.strategy=fsdp", "train.accelerator=gpu", "train.optimizer=adamw"])
    assert FoundryConfig().train.uses_muon
    # A run from a parent's weights takes AdamW, so fine-tuning, retraining and alignment keep their recipes.
    warm = load_config(None, ["train.init_from=/parent/model.pt"])
    assert warm.train.optimizer == "muon" and not warm.train.uses_muon
    assert load_config(None, ["train.strategy=fsdp", "train.accelerator=gpu", "train.init_from=/p/model.pt"])


def test_a_config_recorded_before_rotary_and_muon_keeps_learned_positions_and_adamw():
    recorded = FoundryConfig().model_dump(mode="json")
    del recorded["model"]["positions"], recorded["train"]["optimizer"]  # what a version registered before holds
    config = validate(as_recorded(recorded))
    assert config.model.positions == "learned" and config.train.optimizer == "adamw"
    assert "positions" not in recorded["model"]  # the record itself is left as it was
    newer = FoundryConfig().model_dump(mode="json")
    assert as_recorded(newer) == newer and as_recorded({}) == {}


def test_a_config_recorded_before_overlapping_windows_was_scored_without():
    recorded = FoundryConfig().model_dump(mode="json")
    assert recorded["evaluation"].pop("window_overlap") == 0.5
    assert validate(as_recorded(recorded)).evaluation.window_overlap == 0.0


def test_pretraining_compiles_in_bf16_where_native_and_the_recipes_keep_float32_as_they_were_measured():
    config = FoundryConfig()
    assert (config.train.precision, config.train.compile) == ("bf16-if-native", True)
    dpo = load_config(None, ["align.method=dpo"])
    for variant in (config.training_for("retrain"), config.training_for("align"), dpo.training_for("align")):
        assert (variant.precision, variant.compile) == ("32-true", False)
    # A key a run sets for the variant wins over its recipe.
    assert load_config(None, ["align.train.precision=bf16-mixed"]).training_for("align").precision == "bf16-mixed"


def test_a_config_recorded_with_bf16_mixed_by_default_keeps_it_on_any_cpu():
    """The defaults of 2026-12-02 to 2026-12-04 trained in bf16-mixed wherever they ran; their records say so."""
    recorded = FoundryConfig().model_dump(mode="json")
    recorded["train"]["precision"] = "bf16-mixed"
    assert validate(as_recorded(recorded)).train.resolved_precision(on_gpu=False, cpu_bf16=False) == "bf16-mixed"


def test_a_config_recorded_before_compile_and_bf16_trains_as_it_did_everywhere():
    """A record's `train` holds its own precision and compile; its recipes, from before they set either, kept
    `train`'s, and a record that predates the keys altogether trained uncompiled in auto precision."""
    recorded = FoundryConfig().model_dump(mode="json")
    recorded["train"] |= {"precision": "auto", "compile": False}
    for recipe in (recorded["retrain"]["train"], recorded["align"]["sft_train"], recorded["align"]["dpo_train"]):
        del recipe["precision"], recipe["compile"]
    config = validate(as_recorded(recorded))
    for variant in (config.train, config.training_for("retrain"), config.training_for("align")):
        assert (variant.precision, variant.compile) == ("auto", False)
    del recorded["train"]["precision"], recorded["train"]["compile"]
    older = validate(as_recorded(recorded)).train
    assert (older.precision, older.compile) == ("auto", False)
    assert "precision" not in recorded["train"]  # the record itself is left as it was


def test_min_chars_above_max_chars():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["data.min_chars=500", "data.max_chars=100"])
    message = str(info.value)
    assert "min_chars (500)" in message and "max_chars (100)" in message


def test_several_problems_reported_together():
    with pytest.raises(ConfigError) as info:
        validate({"train": {"max_steps": 0, "batch_size": "x"}})
    message = str(info.value)
    assert "train.max_steps" in message and "train.batch_size" in message


def test_registry_name_pattern():
    with pytest.raises(ConfigError, match="registry.model_name"):
        load_config(None, ["registry.model_name=has space"])


@pytest.mark.parametrize(
    "assignment, fragment",
    [
        ("train.max_steps", "not of the form section.key=value"),
        ("max_steps=3", "must be section.key"),
        ("a.b.c=3", "must be section.key"),
        (".max_steps=3", "must be section.key"),
        ("train.=3", "must be section.key"),
    ],
)
def test_bad_override_syntax(assignment, fragment):
    with pytest.raises(ConfigError, match=fragment) as info:
        load_config(None, [assignment])
    assert repr(assignment.split("=")[0]) in str(info.value)


def test_override_into_a_value_not_a_section():
    raw = {"train": 3}
    with pytest.raises(ConfigError, match="train is a section"):
        apply_override(raw, "train.max_steps=3")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_non_mapping_yaml(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping of sections, not list"):
        load_config(path)


def test_invalid_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML") as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_empty_file_means_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(path) == FoundryConfig()


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_assignment_is_validated():
    config = FoundryConfig()
    with pytest.raises(ValueError):
        config.train.max_steps = 0


# --- flat --------------------------------------------------------------------------------------


def test_flat_has_dotted_keys():
    flat = FoundryConfig().flat()
    for key in ("data.source", "train.max_steps", "train.num_nodes", "train.devices", "registry.model_name"):
        assert key in flat
    config = FoundryConfig()
    assert flat["data.source"] == config.data.source
    assert flat["train.max_steps"] == config.train.max_steps
    assert flat["train.num_nodes"] == config.train.num_nodes and flat["train.devices"] == config.train.devices
    assert flat["registry.model_name"] == config.registry.model_name
    overrides = {"retrain.train": config.retrain.train, "finetune.train": config.finetune.train}
    overrides |= {"align.train": config.align.train}
    overrides |= {"align.sft_train": config.align.sft_train, "align.dpo_train": config.align.dpo_train}
    assert all(key.count(".") == 1 for key in flat if key.rsplit(".", 1)[0] not in overrides)
    # One entry per field of every section, a variant's `train` override counted by the keys it sets.
    sections = [getattr(config, s) for s in FoundryConfig.model_fields]
    expected = sum(len(type(s).model_fields) for s in sections) - len(overrides)
    expected += sum(len(o.model_dump()) for o in overrides.values())
    assert len(flat) == expected
    assert "align.train.max_steps" not in flat  # unset: each method's recipe holds it
    assert (flat["align.sft_train.max_steps"], flat["align.dpo_train.max_steps"]) == (2500, 200)


def test_flat_follows_overrides():
    flat = load_config(
        None,
        [
            "train.max_steps=11",
            "train.devices=4",
            "train.num_nodes=2",
            "data.source=/corpus",
            "registry.model_name=m-1",
        ],
    ).flat()
    assert (flat["train.max_steps"], flat["train.devices"], flat["train.num_nodes"]) == (11, 4, 2)
    assert (flat["data.source"], flat["registry.model_name"]) == ("/corpus", "m-1")


def test_flat_values_are_scalars_lists_as_json():
    flat = load_config(None, ["data.extensions=[.txt, .md]"]).flat()
    assert json.loads(flat["data.extensions"]) == [".txt", ".md"]
    assert all(isinstance(v, (str, int, float, bool)) for v in flat.values())


def test_the_align_section_rejects_unknown_keys_and_methods():
    with pytest.raises(ConfigError, match="align.methd: unknown key; allowed here: method"):
        load_config(None, ["align.methd=dpo"])
    with pytest.raises(ConfigError, match="align.method = 'ppo'"):
        load_config(None, ["align.method=ppo"])
    with pytest.raises(ConfigError, match="align.beta = 0"):
        load_config(None, ["align.beta=0"])


# --- finetune and merge ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "fragment"),
    [
        ("finetune.method=qlora", "finetune.method = 'qlora'"),
        ("finetune.lora_rank=0", "finetune.lora_rank = 0"),
        ("finetune.lora_targets=[attn.qkv, lm_head]", "finetune.lora_targets.1 = 'lm_head'"),
        ("finetune.lora_targets=[]", "finetune.lora_targets = []"),
        ("merge.method=soup", "merge.method = 'soup'"),
        ("merge.density=0", "merge.density = 0"),
        ("merge.weights=[1, -0.5]", "every weight must be positive"),
        ("merge.model_name=-bad", "merge.model_name = '-bad'"),
    ],
)
def test_finetune_and_merge_values_are_checked(assignment, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(None, [assignment])


def test_specialist_and_merge_names_derive_from_the_base():
    config = FoundryConfig()
    assert config.finetune.resolved_model_name("foundry-gpt", "/data/legal/contracts/") == "foundry-gpt-contracts"
    assert config.finetune.resolved_model_name("it-gpt", "stdlib://email") == "it-gpt-email"
    assert config.finetune.resolved_model_name("g", "s3://bucket/a b+c.jsonl") == "g-a-b-c.jsonl"
    assert load_config(None, ["finetune.model_name=legal"]).finetune.resolved_model_name("g", "/x") == "legal"
    assert config.merge.resolved_model_name("foundry-gpt") == "foundry-gpt-merged"
