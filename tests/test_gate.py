"""The whole promotion policy, `foundry.registry.gate.decide`, against a real MLflow registry and no Prefect."""

from __future__ import annotations

import pytest

from foundry import tracking
from foundry.contracts import DataVersion
from foundry.evaluation.metrics import holdout_metrics
from foundry.registry import versions
from foundry.registry.gate import decide, decide_alignment
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


# --- alignment: the aligned model against its base, no registry needed -------------------------------

SFT_OK = {
    "base/response_loss": 3.0,
    "align/response_loss": 0.4,
    "base/pretrain_bits_per_byte": 2.00,
    "align/pretrain_bits_per_byte": 2.015,
}
DPO_OK = {
    "base/preference_accuracy": 0.80,
    "align/preference_accuracy": 0.97,
    "base/preference_margin": 1.5,
    "align/preference_margin": 6.0,
    "base/pretrain_bits_per_byte": 2.0,
    "align/pretrain_bits_per_byte": 2.01,
}


def aligned(config, method: str, **evaluation):
    return config.model_copy(
        update={
            "align": config.align.model_copy(update={"method": method}),
            "evaluation": config.evaluation.model_copy(update=evaluation),
        }
    )


def test_the_alignment_gate_passes_sft_that_learns_without_forgetting(tiny_config):
    decision = decide_alignment(aligned(tiny_config, "sft", max_regression=0.02), SFT_OK)
    assert decision.passed and decision.make_champion
    assert decision.checks == {"response_loss": True, "pretrain_regression": True}
    assert decision.tags()["gate.check.pretrain_regression"] == "true" and decision.tags()["gate.method"] == "sft"
    assert "response_loss 0.4000 vs base 3.0000" in decision.verdict


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        ({"align/response_loss": 3.1}, "response_loss"),  # worse than the base on held-out replies
        ({"align/pretrain_bits_per_byte": 2.03}, "pretrain_regression"),  # forgot more than max_regression
        ({"align/pretrain_bits_per_byte": None}, "pretrain_regression"),  # not measured: not passed
    ],
)
def test_the_alignment_gate_fails_sft_check_by_check(tiny_config, change, failed):
    metrics = {k: v for k, v in {**SFT_OK, **change}.items() if v is not None}
    decision = decide_alignment(aligned(tiny_config, "sft", max_regression=0.02), metrics)
    assert not decision.passed and not decision.make_champion
    assert [name for name, ok in decision.checks.items() if not ok] == [failed]
    assert f"FAILED {failed.replace('pretrain_regression', 'pretrain_bits_per_byte')}" in decision.verdict


def test_the_alignment_gate_for_dpo_wants_more_preferences_won_and_a_wider_margin(tiny_config):
    config = aligned(tiny_config, "dpo", max_regression=0.02)
    assert decide_alignment(config, DPO_OK).passed
    perfect = {**DPO_OK, "base/preference_accuracy": 1.0, "align/preference_accuracy": 1.0}
    assert decide_alignment(config, perfect).checks["preference_accuracy"]  # cannot rise above 1
    worse = decide_alignment(config, {**DPO_OK, "align/preference_accuracy": 0.75})
    assert worse.checks == {"preference_accuracy": False, "preference_margin": True, "pretrain_regression": True}
    narrower = decide_alignment(config, {**DPO_OK, "align/preference_margin": 1.0})
    assert not narrower.passed and not narrower.checks["preference_margin"]
    review = config.model_copy(update={"registry": config.registry.model_copy(update={"auto_promote": False})})
    assert decide_alignment(review, DPO_OK).passed and not decide_alignment(review, DPO_OK).make_champion
