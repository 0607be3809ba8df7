"""`finetune.train`: a fine-tune's own `train` keys. Pretraining's AdamW rate was raised for Muon's share
(`train.learning_rate`); a fine-tune trains every weight (or the adapters) with AdamW at the rate it had before."""

from __future__ import annotations

import pytest
from conftest import REPO_ROOT

from foundry.config import FoundryConfig, as_recorded, load_config, validate
from foundry.config.training import ADAMW_LEARNING_RATE, MUON_SHARE_LEARNING_RATE
from foundry.core.contracts import ParentModel, SourceManifest
from foundry.specialists.finetune import specialist_config


def text_base(config: FoundryConfig) -> ParentModel:
    """A registered text model as `base_model` hands it over: its recorded config, no files."""
    manifest = SourceManifest(source="s", digest="d", files=0, bytes=0, entries=[])
    return ParentModel(
        uri="models:/gpt/1",
        weights="model.pt",
        tokenizer="tok.json",
        config=config.model_dump(),
        source_manifest=manifest,
    )


def domain(tmp_path, *overrides: str) -> FoundryConfig:
    (tmp_path / "contracts").mkdir(exist_ok=True)
    (tmp_path / "contracts" / "a.txt").write_text("a clause of a contract\n")
    return load_config(None, [f"data.source={tmp_path / 'contracts'}", *overrides])


def test_pretraining_takes_muons_share_rate_and_a_fine_tune_the_rate_it_had(tmp_path):
    config = FoundryConfig()
    assert config.train.learning_rate == MUON_SHARE_LEARNING_RATE and config.train.optimizer == "muon"
    assert config.training_for("finetune").learning_rate == ADAMW_LEARNING_RATE
    tuned = specialist_config(domain(tmp_path, "train.max_steps=9"), text_base(config))
    assert tuned.train.learning_rate == ADAMW_LEARNING_RATE and tuned.train.init_from == "model.pt"
    assert tuned.train.max_steps == 9 and not tuned.train.uses_muon  # train's other keys; AdamW from a parent
    assert tuned.finetune.train.learning_rate == ADAMW_LEARNING_RATE  # recorded as it trained


@pytest.mark.parametrize(
    ("setting", "rate"), [("finetune.train.learning_rate=0.01", 0.01), ("finetune.train.learning_rate=null", 0.004)]
)
def test_a_runs_own_fine_tune_rate_wins_and_null_keeps_trains(tmp_path, setting, rate):
    given = domain(tmp_path, "train.learning_rate=0.004", setting)
    assert specialist_config(given, text_base(FoundryConfig())).train.learning_rate == rate


@pytest.mark.parametrize("name", ["tiny.yaml", "vision.yaml", "vision-tiny.yaml"])
def test_the_twins_fine_tune_at_their_own_rate_as_before_the_recipe(name):
    config = load_config(REPO_ROOT / "configs" / name)
    assert config.training_for("finetune").learning_rate == config.train.learning_rate != ADAMW_LEARNING_RATE


def test_a_config_recorded_before_the_recipe_fine_tunes_at_its_trains_rate():
    """A specialist recorded before `finetune.train` trained at its `train.learning_rate` (then the default
    0.0059, or its own): read again, it still does, and the record is left as it was."""
    recorded = FoundryConfig().model_dump(mode="json")
    del recorded["finetune"]["train"]
    recorded["train"] |= {"learning_rate": 0.002, "weight_decay": 0.1}
    config = validate(as_recorded(recorded))
    assert config.training_for("finetune").learning_rate == 0.002 and config.finetune.train.learning_rate is None
    assert config.training_for("finetune").weight_decay == 0.1 and config.finetune.train.weight_decay is None
    assert "train" not in recorded["finetune"]


def test_a_train_rate_a_fine_tune_does_not_take_is_named_in_a_warning(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="foundry.training.warm_start"):
        specialist_config(domain(tmp_path, "train.learning_rate=0.004"), text_base(FoundryConfig()))
    (record,) = caplog.records
    assert "train.learning_rate 0.004 does not reach a fine-tune" in record.getMessage()
    assert str(ADAMW_LEARNING_RATE) in record.getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="foundry.training.warm_start"):
        specialist_config(domain(tmp_path, "train.weight_decay=0.05"), text_base(FoundryConfig()))
    (record,) = caplog.records
    assert "train.weight_decay 0.05 does not reach a fine-tune: it trains at finetune.train.weight_decay 0.1" in (
        record.getMessage()
    )
    caplog.clear()
    quiet_decay = ["train.weight_decay=0.05", "finetune.train.weight_decay=null"]
    for quiet in ([], ["train.learning_rate=0.004", "finetune.train.learning_rate=null"], quiet_decay):
        with caplog.at_level("WARNING", logger="foundry.training.warm_start"):
            specialist_config(domain(tmp_path, *quiet), text_base(FoundryConfig()))
        assert caplog.records == []
