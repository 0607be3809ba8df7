"""The whole promotion policy, `foundry.registry.gate.decide`, against a real MLflow registry and no Prefect."""

from __future__ import annotations

import pytest

from foundry import tracking
from foundry.contracts import DataVersion
from foundry.evaluation.metrics import holdout_metrics
from foundry.registry import versions
from foundry.registry.gate import decide
from foundry.serving.package import log_model
from models.gpt import GPT, GPTConfig, load_gpt


@pytest.fixture(scope="module")
def champion_checkpoint(tiny_config, tiny_dataset, tmp_path_factory):
    """A small random model over the tiny dataset's tokenizer, saved as training saves `model.pt`."""
    import json

    import torch

    vocab = json.loads((tiny_dataset / "manifest.json").read_text())["vocab_size"]
    args = {"vocab_size": vocab, **tiny_config.model.model_dump()}
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("champion") / "model.pt"
    torch.save({"model_args": args, "state_dict": GPT(GPTConfig(**args)).state_dict()}, path)
    return path


def register_champion(name: str, config, checkpoint, tokenizer, tags: dict) -> str:
    run_id = tracking.start_pipeline_run(config, run_name=f"gate-{name}")
    version = versions.register(log_model(run_id, checkpoint, tokenizer), name, run_id, tags)
    versions.promote(name, version, True, "seeded for the test")
    return version


def test_no_champion_passes(tiny_config, tiny_dataset, foundry_home):
    config = tiny_config.model_copy(
        update={"registry": tiny_config.registry.model_copy(update={"model_name": "gate-none"})}
    )
    metrics = {"holdout/bits_per_byte": 3.0}
    decision = decide(config, metrics, tiny_dataset, DataVersion(data_version="v1", remote="r"), foundry_home)
    assert decision.passed and decision.make_champion and decision.verdict == "no champion yet"
    assert decision.champion_version is None


def test_a_champion_of_the_same_data_is_compared_by_its_recorded_score(
    tiny_config, tiny_dataset, champion_checkpoint, foundry_home
):
    name = "gate-same"
    config = tiny_config.model_copy(update={"registry": tiny_config.registry.model_copy(update={"model_name": name})})
    version = register_champion(
        name,
        config,
        champion_checkpoint,
        tiny_dataset / "tokenizer.json",
        {"data_version": "v1", "holdout/bits_per_byte": "2.500000"},
    )
    data = DataVersion(data_version="v1", remote="r")
    better = decide(config, {"holdout/bits_per_byte": 2.4}, tiny_dataset, data, foundry_home)
    assert better.passed and better.champion_bits_per_byte == 2.5 and better.champion_version == version
    worse = decide(config, {"holdout/bits_per_byte": 2.6}, tiny_dataset, data, foundry_home)
    assert not worse.passed and "does not beat champion's 2.5000" in worse.verdict
    assert worse.tags()["gate.champion_bits_per_byte"] == "2.500000"


def test_a_champion_of_other_data_is_rescored_on_this_holdout(
    tiny_config, tiny_dataset, champion_checkpoint, foundry_home
):
    name = "gate-other"
    config = tiny_config.model_copy(update={"registry": tiny_config.registry.model_copy(update={"model_name": name})})
    register_champion(
        name,
        config,
        champion_checkpoint,
        tiny_dataset / "tokenizer.json",
        {"data_version": "v-old", "holdout/bits_per_byte": "0.100000"},
    )
    e = config.evaluation
    expected = holdout_metrics(
        load_gpt(champion_checkpoint), tiny_dataset / "tokenizer.json", tiny_dataset, e.batch_size, e.max_tokens
    )["holdout/bits_per_byte"]
    decision = decide(
        config,
        {"holdout/bits_per_byte": expected - 0.01},
        tiny_dataset,
        DataVersion(data_version="v-new", remote="r"),
        foundry_home,
    )
    # The recorded 0.1 (other data) is ignored: the champion is scored on this holdout.
    assert decision.champion_bits_per_byte == pytest.approx(expected, rel=1e-9) and decision.passed


def test_review_mode_passes_but_leaves_promotion_to_a_reviewer(tiny_config, tiny_dataset, foundry_home):
    registry = tiny_config.registry.model_copy(update={"model_name": "gate-review", "auto_promote": False})
    config = tiny_config.model_copy(update={"registry": registry})
    decision = decide(
        config, {"holdout/bits_per_byte": 3.0}, tiny_dataset, DataVersion(data_version="v", remote="r"), foundry_home
    )
    assert decision.passed and not decision.make_champion


def test_a_gain_below_min_improvement_is_refused(tiny_config, tiny_dataset, champion_checkpoint, foundry_home):
    name = "gate-margin"
    evaluation = tiny_config.evaluation.model_copy(update={"min_improvement": 0.2})
    config = tiny_config.model_copy(
        update={"registry": tiny_config.registry.model_copy(update={"model_name": name}), "evaluation": evaluation}
    )
    register_champion(
        name,
        config,
        champion_checkpoint,
        tiny_dataset / "tokenizer.json",
        {"data_version": "v1", "holdout/bits_per_byte": "2.500000"},
    )
    data = DataVersion(data_version="v1", remote="r")
    small = decide(config, {"holdout/bits_per_byte": 2.4}, tiny_dataset, data, foundry_home)
    assert not small.passed and not small.make_champion and "by 0.2" in small.verdict
    large = decide(config, {"holdout/bits_per_byte": 2.25}, tiny_dataset, data, foundry_home)
    assert large.passed and large.make_champion
