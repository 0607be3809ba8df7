"""The whole promotion policy, `foundry.registry.gate.decide`, against a real MLflow registry and a real DVC
remote, without Prefect: the comparison on the new holdout, the forgetting guard on the champion's own
holdout, and the refusal of a champion the data was not built on."""

# ruff: noqa: F811  (the fixtures imported from helpers_gate are test arguments here)
from __future__ import annotations

import pytest
from helpers_gate import (  # noqa: F401  (fixtures)
    champion_checkpoint,
    fit,
    named,
    old_data,
    register_champion,
    save,
)
from synthetic import synthetic_docs

from foundry.align.gate import alignment_inputs
from foundry.config import load_config
from foundry.core.contracts import Candidate, DataVersion, RunContext
from foundry.core.metrics.aligned import AlignmentMetrics
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.core.preparing import DataBasis, Preparing
from foundry.data.acquire import acquire_source
from foundry.gates import alignment
from foundry.pretrain.holdout_metrics import gate_score
from foundry.pretrain.prepare import prepare
from foundry.pretrain.shards import load_split
from foundry.registry import gate
from models.gpt import load_gpt


def decide(config, checkpoint, metrics: dict, data_dir, data, home, built_on=None):
    """The pretraining gate on a candidate of these parts (a flow builds the `Candidate` itself)."""
    run = RunContext(run_id="gate-test", dir=home, home=home)
    held = HoldoutMetrics.from_mlflow(metrics)
    candidate = Candidate(checkpoint=checkpoint, data=data, data_dir=data_dir, metrics=held, run=run)
    return gate.decide(config, candidate, built_on)


def decide_alignment(config, metrics: dict):
    """The alignment gate's rule on the flow's metrics, as MLflow has them, with no champion of its name."""
    return alignment.decide(alignment_inputs(config, AlignmentMetrics.from_mlflow(metrics)))


def passed(decision) -> dict[str, bool]:
    return {name: check.passed for name, check in decision.checks.items()}


def test_no_champion_passes(tiny_config, tiny_dataset, champion_checkpoint, foundry_home):
    config = named(tiny_config, "gate-none")
    metrics = {"holdout/bits_per_byte": 3.0}
    data = DataVersion(data_version="1" * 32, remote="r")
    decision = decide(config, champion_checkpoint, metrics, tiny_dataset, data, foundry_home)
    assert decision.passed and decision.make_champion and decision.verdict == "no champion yet"
    assert decision.inputs.champion_version is None and decision.inputs.old_holdout is None


def test_a_champion_of_the_same_data_is_compared_by_its_recorded_score(
    tiny_config, old_data, champion_checkpoint, foundry_home
):
    data, folder = old_data
    config = named(tiny_config, "gate-same")
    tags = {"data_version": data.data_version, "data.remote": data.remote, "holdout/bits_per_byte": "2.500000"}
    version = register_champion(config, champion_checkpoint, folder / "tokenizer.json", tags)
    better = decide(config, champion_checkpoint, {"holdout/bits_per_byte": 2.4}, folder, data, foundry_home)
    assert better.passed and better.inputs.champion_bits_per_byte == 2.5 and better.inputs.champion_version == version
    assert better.inputs.old_holdout.data_version == data.data_version  # the same holdout: the same scores
    worse = decide(config, champion_checkpoint, {"holdout/bits_per_byte": 2.6}, folder, data, foundry_home)
    assert not worse.passed and "does not beat champion's 2.5000" in worse.verdict
    assert worse.tags()["gate.champion_bits_per_byte"] == "2.500000"


@pytest.mark.parametrize(
    "name, registered, now",
    [
        ("gate-tokens", {}, {"max_tokens": 100}),  # fewer bytes of the same holdout than its run scored
        ("gate-overlap", {"window_overlap": 0.0}, {"window_overlap": 0.5}),  # windows apart, as before the key
    ],
)
def test_a_champion_scored_otherwise_on_the_same_holdout_is_rescored(
    tiny_config, old_data, champion_checkpoint, foundry_home, name, registered, now
):
    """Its recorded score covered other `evaluation.max_tokens` of the holdout, or read it in windows that overlap
    otherwise (`evaluation.window_overlap`): the recorded figure is not comparable, so the champion is scored
    again as this run scores."""
    data, folder = old_data
    config = named(tiny_config, name, **registered)
    tags = {"data_version": data.data_version, "data.remote": data.remote, "holdout/bits_per_byte": "2.500000"}
    register_champion(config, champion_checkpoint, folder / "tokenizer.json", tags)
    this_run = named(config, name, **now)
    expected = gate_score(champion_checkpoint, folder / "tokenizer.json", folder, this_run)
    decision = decide(this_run, champion_checkpoint, {"holdout/bits_per_byte": 2.4}, folder, data, foundry_home)
    assert decision.inputs.champion_bits_per_byte == pytest.approx(expected, rel=1e-9) != 2.5
    assert expected != pytest.approx(
        gate_score(champion_checkpoint, folder / "tokenizer.json", folder, config), rel=1e-6
    )


@pytest.fixture(scope="module")
def new_data(tiny_config, old_data, tmp_path_factory):
    """New documents (another corpus altogether) on the old data version's ledger and tokenizer."""
    _, folder = old_data
    root = tmp_path_factory.mktemp("new-data")
    (root / "corpus").mkdir()
    for i, text in enumerate(synthetic_docs(120, seed=3)):
        (root / "corpus" / f"soup{i:03d}.txt").write_text(text)
    config = load_config(
        None,
        [
            f"data.source={root / 'corpus'}",
            "data.holdout_fraction=0.2",
            f"tokenizer.from_file={folder / 'tokenizer.json'}",
            f"model.block_size={tiny_config.model.block_size}",
        ],
    )
    source = acquire_source(config.data, root / "source_manifest.json")
    prepare(Preparing(source, config, root / "prepared", basis=DataBasis(folder, 0.0)))
    return DataVersion(data_version="2" * 32, remote="r"), root / "prepared"


def test_a_challenger_that_improves_on_new_data_but_forgets_the_old_is_refused(
    tiny_config, old_data, new_data, champion_checkpoint, foundry_home, tmp_path
):
    old, old_folder = old_data
    new, new_folder = new_data
    config = named(tiny_config, "gate-forget")
    champion_bpb = gate_score(champion_checkpoint, old_folder / "tokenizer.json", old_folder, config)
    tags = {"data_version": old.data_version, "data.remote": old.remote, "holdout/bits_per_byte": f"{champion_bpb}"}
    register_champion(config, champion_checkpoint, old_folder / "tokenizer.json", tags)
    # Fine-tuned hard on the new documents alone: much better on them, worse on what the champion knew.
    challenger = save(fit(load_gpt(champion_checkpoint), load_split(new_folder, "train"), 60, 1e-2), tmp_path / "c.pt")
    metrics = {"holdout/bits_per_byte": gate_score(challenger, new_folder / "tokenizer.json", new_folder, config)}

    refused = decide(config, challenger, metrics, new_folder, new, foundry_home, built_on=old.data_version)
    assert refused.inputs.champion_bits_per_byte > metrics["holdout/bits_per_byte"]  # better on the new holdout
    forgot = refused.inputs.old_holdout
    assert forgot.data_version == old.data_version and forgot.champion_bits_per_byte == pytest.approx(champion_bpb)
    assert forgot.regression > config.evaluation.max_regression and forgot.forgets
    assert not refused.passed and refused.verdict.startswith("forgets:") and "beats champion's" in refused.verdict
    tags = refused.tags()
    assert tags["gate.old_holdout_version"] == old.data_version and tags["gate.max_regression"] == "0.02"
    assert float(tags["gate.challenger_old_bits_per_byte"]) == pytest.approx(forgot.challenger_bits_per_byte, rel=1e-5)

    from foundry.reports.cards import forgetting

    assert "more than the 0.02 allowed" in forgetting(refused)
    # The guard alone decided: allow the regression and the same challenger passes.
    lenient = named(config, "gate-forget", max_regression=100.0)
    assert decide(lenient, challenger, metrics, new_folder, new, foundry_home, built_on=old.data_version).passed


def test_a_champion_the_data_was_not_built_on_is_not_compared(
    tiny_config, old_data, new_data, champion_checkpoint, foundry_home
):
    """A new champion appeared while this run prepared its data on another ledger (or none): its training
    documents may be in this holdout, so the comparison would be unfair; the run is refused."""
    old, old_folder = old_data
    new, new_folder = new_data
    config = named(tiny_config, "gate-moved")
    tags = {"data_version": old.data_version, "data.remote": old.remote, "holdout/bits_per_byte": "9.0"}
    register_champion(config, champion_checkpoint, old_folder / "tokenizer.json", tags)
    metrics = {"holdout/bits_per_byte": 1.0}
    decision = decide(config, champion_checkpoint, metrics, new_folder, new, foundry_home, built_on=None)
    assert not decision.passed and "is not the version this run's data was built on" in decision.verdict


def test_a_champion_of_other_data_is_rescored_on_this_holdout(
    tiny_config, tiny_dataset, old_data, champion_checkpoint, foundry_home
):
    old, _ = old_data
    config = named(tiny_config, "gate-other")
    tags = {"data_version": old.data_version, "data.remote": old.remote, "holdout/bits_per_byte": "0.100000"}
    register_champion(config, champion_checkpoint, tiny_dataset / "tokenizer.json", tags)
    expected = gate_score(champion_checkpoint, tiny_dataset / "tokenizer.json", tiny_dataset, config)
    decision = decide(
        config,
        champion_checkpoint,
        {"holdout/bits_per_byte": expected - 0.01},
        tiny_dataset,
        DataVersion(data_version="3" * 32, remote="r"),
        foundry_home,
        built_on=old.data_version,
    )
    # The recorded 0.1 (other data) is ignored: the champion is scored on this holdout.
    assert decision.inputs.champion_bits_per_byte == pytest.approx(expected, rel=1e-9) and decision.passed


def test_review_mode_passes_but_leaves_promotion_to_a_reviewer(
    tiny_config, tiny_dataset, champion_checkpoint, foundry_home
):
    registry = tiny_config.registry.model_copy(update={"model_name": "gate-review", "auto_promote": False})
    config = tiny_config.model_copy(update={"registry": registry})
    data = DataVersion(data_version="4" * 32, remote="r")
    decision = decide(config, champion_checkpoint, {"holdout/bits_per_byte": 3.0}, tiny_dataset, data, foundry_home)
    assert decision.passed and not decision.make_champion


def test_a_gain_below_min_improvement_is_refused(tiny_config, old_data, champion_checkpoint, foundry_home):
    data, folder = old_data
    config = named(tiny_config, "gate-margin", min_improvement=0.2)
    tags = {"data_version": data.data_version, "data.remote": data.remote, "holdout/bits_per_byte": "2.500000"}
    register_champion(config, champion_checkpoint, folder / "tokenizer.json", tags)
    small = decide(config, champion_checkpoint, {"holdout/bits_per_byte": 2.4}, folder, data, foundry_home)
    assert not small.passed and not small.make_champion and "by 0.2" in small.verdict
    large = decide(config, champion_checkpoint, {"holdout/bits_per_byte": 2.25}, folder, data, foundry_home)
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
    assert passed(decision) == {"response_loss": True, "pretrain_regression": True}
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
    assert [name for name, ok in passed(decision).items() if not ok] == [failed]
    assert f"FAILED {failed.replace('pretrain_regression', 'pretrain_bits_per_byte')}" in decision.verdict


def test_the_alignment_gate_for_dpo_wants_accuracy_no_lower_and_a_wider_margin(tiny_config):
    config = aligned(tiny_config, "dpo", max_regression=0.02)
    assert decide_alignment(config, DPO_OK).passed
    # The bench's case: an SFT start that already wins 99.59% of the pairs, DPO keeps that and widens the margin.
    kept = decide_alignment(config, {**DPO_OK, "base/preference_accuracy": 0.9959, "align/preference_accuracy": 0.9959})
    assert kept.passed and "ok preference_accuracy 0.9959 vs base 0.9959 (may not be lower)" in kept.verdict
    worse = decide_alignment(config, {**DPO_OK, "align/preference_accuracy": 0.75})
    assert passed(worse) == {"preference_accuracy": False, "preference_margin": True, "pretrain_regression": True}
    assert not worse.passed and "FAILED preference_accuracy 0.7500 vs base 0.8000 (may not be lower)" in worse.verdict
    narrower = decide_alignment(config, {**DPO_OK, "align/preference_margin": 1.0})
    assert not narrower.passed and not narrower.checks["preference_margin"].passed
    assert "FAILED preference_margin 1.0000 vs base 1.5000 (must be wider)" in narrower.verdict
    review = config.model_copy(update={"registry": config.registry.model_copy(update={"auto_promote": False})})
    assert decide_alignment(review, DPO_OK).passed and not decide_alignment(review, DPO_OK).make_champion
