"""The gate, promotion, publication and run tags are named once in `foundry.core` and keep the keys (and values)
versions and runs carry today: each test lists them literally, so that a renamed key fails."""

from __future__ import annotations

from foundry.core import gate_tags, run_tags
from foundry.core import version_tags as tag
from foundry.core.metrics.scores import AlignedScores
from foundry.core.run_tags import RunTags
from foundry.core.version_tags import PromotionTags, Publication, VersionTags
from foundry.gates.decision import Check, Decision
from foundry.gates.inputs import (
    AlignmentInputs,
    MergeInputs,
    OldHoldout,
    PretrainInputs,
)
from foundry.vision.gate_inputs import ImageSpecialistInputs, OldImageHoldout


def test_a_pretraining_gates_tags_with_a_purged_old_holdout_are_the_keys_recorded_today():
    old = OldHoldout(
        data_version="ab" * 16,
        max_regression=0.02,
        challenger_bits_per_byte=1.25,
        champion_bits_per_byte=1.5,
        replaces="cd" * 16,
        purge_record="purge-1",
    )
    inputs = PretrainInputs(
        challenger_bits_per_byte=1.4,
        min_improvement=0.01,
        auto_promote=True,
        champion_version="3",
        champion_bits_per_byte=1.5,
        old_holdout=old,
    )
    decision = Decision.of(inputs, {"beats_champion": Check(passed=True)}, "better")
    assert decision.tags() == {
        "gate.verdict": "better",
        "gate.passed": "true",
        "gate.challenger_bits_per_byte": "1.400000",
        "gate.champion_bits_per_byte": "1.500000",
        "gate.champion_version": "3",
        "gate.min_improvement": "0.01",
        "gate.old_holdout_version": "ab" * 16,
        "gate.challenger_old_bits_per_byte": "1.250000",
        "gate.champion_old_bits_per_byte": "1.500000",
        "gate.max_regression": "0.02",
        "gate.old_holdout_replaces": "cd" * 16,
        "gate.old_holdout_purge": "purge-1",
    }
    assert decision.run_tags() == {"gate.verdict": "better", "gate.passed": "true"}


def test_an_image_specialists_tags_name_its_incumbent_by_accuracy():
    inputs = ImageSpecialistInputs(
        challenger_accuracy=0.9,
        min_improvement=0.0,
        auto_promote=False,
        base="models:/digits/1",
        incumbent_version="2",
        incumbent_accuracy=0.85,
        old_holdout=OldImageHoldout(
            data_version="v0", max_regression=0.05, challenger_accuracy=0.8, champion_accuracy=0.82
        ),
    )
    tags = Decision.of(inputs, {}, "no champion").tags()
    assert tags["gate.incumbent_version"] == "2" and tags["gate.incumbent_accuracy"] == "0.850000"
    assert (tags["gate.challenger_accuracy"], tags["gate.champion_accuracy"]) == ("0.900000", "")
    assert (tags["gate.challenger_old_accuracy"], tags["gate.champion_old_accuracy"]) == ("0.800000", "0.820000")
    assert "gate.old_holdout_replaces" not in tags  # only when a purge replaced the champion's holdout


def test_a_merges_and_an_alignments_tags_are_the_keys_recorded_today():
    merge = MergeInputs(scores=[], max_gap=0.05, auto_promote=True, incumbent_version="4")
    assert Decision.of(merge, {}, "merged").tags() == {
        "gate.verdict": "merged",
        "gate.passed": "true",
        "gate.max_gap": "0.05",
        "gate.incumbent_version": "4",
    }
    scores = AlignedScores(response_loss=1.0, pretrain_bits_per_byte=1.5)
    aligned = AlignmentInputs(method="sft", aligned=scores, base=scores, max_regression=0.1, auto_promote=False)
    checks = {"response_loss": Check(passed=True), "pretrain_bits_per_byte": Check(passed=False)}
    assert Decision.of(aligned, checks, "forgets").tags() == {
        "gate.verdict": "forgets",
        "gate.passed": "false",
        "gate.method": "sft",
        "gate.max_regression": "0.1",
        "gate.check.response_loss": "true",
        "gate.check.pretrain_bits_per_byte": "false",
    }


def test_a_publications_marks_are_the_keys_recorded_today():
    marks = Publication(replaces={"challenger": "6", "champion": ""}).as_tags()
    assert marks == {
        "foundry.publication": "pending",
        "gate.promoted": "false",
        "foundry.replaces_challenger": "6",
        "foundry.replaces_champion": "",
    }
    assert (tag.PUBLICATION, tag.PENDING, tag.COMPLETE) == ("foundry.publication", "pending", "complete")
    assert (gate_tags.PROMOTED, gate_tags.flag(True)) == ("gate.promoted", "true")


def test_a_reviewers_promotion_writes_the_keys_recorded_today_and_reads_back():
    promotion = PromotionTags(
        promoted_by="ada", promotion_reason="reviewed", promoted_at="2026-12-06T07:00:00+00:00", replaced_champion="3"
    )
    written = promotion.as_tags()
    assert list(written.items()) == [
        ("promoted_by", "ada"),
        ("promotion_reason", "reviewed"),
        ("gate.promoted", "true"),
        ("promoted_at", "2026-12-06T07:00:00+00:00"),
        ("replaced_champion", "3"),
    ]
    assert PromotionTags.from_tags({**written, "run_id": "r"}) == promotion
    assert PromotionTags.from_tags({"gate.promoted": "true"}) is None  # promoted by its gate, not a reviewer


def test_the_other_version_tags_keep_their_keys():
    keys = (tag.PURGE, tag.PURGE_WHO, tag.PURGE_CRITERION, tag.EXPORT, tag.REREGISTERED_FROM, tag.CONFIG)
    assert keys == (
        "foundry.purge",
        "foundry.purge.who",
        "foundry.purge.criterion",
        "foundry.export.",
        "reregistered_from",
        "config",
    )


def test_an_aligned_versions_tags_add_the_keys_recorded_today():
    base = VersionTags(run_id="r", data_version="d", data_remote="s3://b", data_source="chat.jsonl")
    aligned = base.with_align_method("dpo").with_pretrain_data("ab" * 16, "s3://pretrain")
    assert aligned.as_tags() == base.as_tags() | {
        "align.method": "dpo",
        "pretrain.data_version": "ab" * 16,
        "pretrain.data.remote": "s3://pretrain",
    }
    assert base.with_align_method("sft").as_tags() == base.as_tags() | {"align.method": "sft"}
    assert base.as_tags() == {"run_id": "r", "data_version": "d", "data.remote": "s3://b", "data.source": "chat.jsonl"}


def test_every_field_of_a_flows_run_tags_writes_the_key_recorded_today():
    every = RunTags(
        flow_run="f",
        stage="align",
        parent_model="models:/foundry-gpt/3",
        align_method="dpo",
        replay_source="ab",
        reproduces="models:/foundry-gpt/2",
        retrains="models:/foundry-gpt/1",
        reregistered_from="models:/foundry-gpt/4",
    )
    assert every.as_tags() == {
        "prefect.flow_run_id": "f",
        "foundry.stage": "align",
        "parent_model": "models:/foundry-gpt/3",
        "align.method": "dpo",
        "align.replay_source": "ab",
        "foundry.reproduces": "models:/foundry-gpt/2",
        "foundry.retrains": "models:/foundry-gpt/1",
        "reregistered_from": "models:/foundry-gpt/4",
    }
    assert RunTags(flow_run="f").as_tags() == {"prefect.flow_run_id": "f"}  # an empty field is no tag


def test_the_single_run_tags_keep_their_keys():
    named = [
        (run_tags.PARENT_RUN, "mlflow.parentRunId"),
        (run_tags.MLFLOW_GIT_COMMIT, "mlflow.source.git.commit"),
        (run_tags.HOST, "foundry.host"),
        (run_tags.PID, "foundry.pid"),
        (run_tags.STARTED, "foundry.pid_started"),
        (run_tags.FAILURE, "foundry.failure"),
        (run_tags.PARENT_DATA_VERSION, "parent_data_version"),
        (run_tags.RETRAIN_SKIPPED, "retrain.skipped"),
        (run_tags.RESUMED_FROM_STEP, "resumed_from_step"),
        (run_tags.RESOLVED_PRECISION, "train.resolved_precision"),
        (run_tags.HOSTS, "train.hosts"),
        (run_tags.DATASET_CONTEXT, "mlflow.data.context"),
        (run_tags.DATASET_SOURCE, "source"),
        (run_tags.EVALUATES, "foundry.evaluates"),
        (run_tags.ASKED, "foundry.model_uri"),
        (run_tags.TOKENIZER, "foundry.tokenizer"),
        (run_tags.COMPARABLE, "foundry.comparable"),
        (run_tags.NOT_COMPARABLE, "foundry.not_comparable"),
        (run_tags.SEARCH_STUDY, "search.study"),
        (run_tags.SEARCH_STORAGE, "search.storage"),
        (run_tags.SEARCH_TRIAL, "search.trial"),
        (run_tags.SEARCH_STATE, "search.state"),
        (run_tags.SEARCH_CORES, "search.cores"),
        (run_tags.SEARCH_BEST_TRIAL, "search.best_trial"),
        (run_tags.SEARCH_BEST_RUN, "search.best_run_id"),
        (run_tags.SEARCH_PLOT, "search.plot."),
        (run_tags.OPTUNA_VERSION, "version.optuna"),
        (run_tags.PACKAGE_VERSION, "version."),
    ]
    assert [key for key, _ in named] == [recorded for _, recorded in named]


def test_a_runs_owner_git_and_training_tags_read_back_from_the_keys_recorded_today():
    from foundry.core.run_tags import RunOwner

    owner = RunOwner(host="h", pid="42", started="1.500")
    assert owner.as_tags() == {"foundry.host": "h", "foundry.pid": "42", "foundry.pid_started": "1.500"}
    assert RunOwner.from_tags(owner.as_tags()) == owner and RunOwner.from_tags({}) == RunOwner()
    assert RunTags.parent_run_of({"mlflow.parentRunId": "p"}) == "p" and RunTags.parent_run_of({}) is None
    assert RunTags.git_of({"mlflow.source.git.commit": "c1", "git_commit": "c0", "git_dirty": "true"}) == {
        "git_commit": "c1",
        "git_dirty": "true",
    }
    assert RunTags.git_of({"git_commit": "c0"}) == {"git_commit": "c0", "git_dirty": "unknown"}  # before MLflow's
    assert RunTags.git_of({}) == {"git_commit": "unknown", "git_dirty": "unknown"}
    assert RunTags.resolved_precision_of({"train.resolved_precision": "bf16-mixed"}) == "bf16-mixed"
    assert RunTags.trained_uncompiled({"train.compiled": "false"}) and not RunTags.trained_uncompiled({})
