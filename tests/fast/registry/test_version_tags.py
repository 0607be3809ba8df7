"""`VersionTags` writes exactly the tags versions carried before it existed, and reads every earlier layout."""

from __future__ import annotations

import json

from foundry.core.contracts import DataVersion
from foundry.core.version_tags import VersionTags
from foundry.gates.decision import Check, Decision
from foundry.gates.inputs import PretrainInputs
from foundry.registry import tags as registry_tags
from foundry.registry.lineage import version_tags

RUN = "0123456789abcdef0123456789abcdef"
DATA = DataVersion(data_version="fedcba9876543210fedcba9876543210", remote="s3://bucket/dvc")
GIT = {"git_commit": "abc123", "git_dirty": "false"}


def decision() -> Decision:
    inputs = PretrainInputs(
        champion_bits_per_byte=1.5,
        champion_version="3",
        challenger_bits_per_byte=1.4,
        min_improvement=0.01,
        auto_promote=True,
    )
    return Decision.of(inputs, {"beats_champion": Check(passed=True)}, "better")


def test_a_trained_versions_tags_are_the_literal_dict_they_always_were(tiny_config):
    gate = decision()
    written = version_tags(tiny_config, RUN, DATA, "d1g35t", gate, GIT, "models:/foundry-gpt/3").as_tags()
    assert written == {
        "run_id": RUN,
        "data_version": DATA.data_version,
        "data.remote": "s3://bucket/dvc",
        "data.source": tiny_config.data.source,
        "data.source_digest": "d1g35t",
        "git_commit": "abc123",
        "git_dirty": "false",
        **gate.tags(),
        "parent_model": "models:/foundry-gpt/3",
    }
    assert "gate.verdict" in written and written["gate.passed"] == "true"


def test_a_version_trained_from_scratch_carries_no_parent_tag(tiny_config):
    written = version_tags(tiny_config, RUN, DATA, "", decision(), GIT).as_tags()
    assert "parent_model" not in written and written["data.source_digest"] == ""  # an empty digest is written


def test_a_merges_tags_are_the_literal_dict_they_always_were():
    gate, recipe = decision(), json.dumps({"method": "ties"})
    written = VersionTags(
        run_id=RUN,
        data_source="merge of models:/legal/1, models:/medical/1",
        git_commit="abc123",
        git_dirty="true",
        gate=gate.tags(),
        parent_model="models:/legal/1,models:/medical/1",
        merge_base="models:/foundry-gpt/3",
        merge_recipe=recipe,
    ).as_tags()
    assert written == {
        "run_id": RUN,
        "data_version": "",
        "data.remote": "",
        "data.source": "merge of models:/legal/1, models:/medical/1",
        "git_commit": "abc123",
        "git_dirty": "true",
        **gate.tags(),
        "parent_model": "models:/legal/1,models:/medical/1",
        "merge.base": "models:/foundry-gpt/3",
        "merge.recipe": recipe,
    }


def test_an_aligned_versions_tags_add_its_method_and_the_pretraining_data(tiny_config):
    base = version_tags(tiny_config, RUN, DATA, "d", decision(), GIT, "models:/foundry-gpt/3")
    aligned = base.with_align_method("dpo").with_pretrain_data("ab" * 16, "/remote")
    extra = {"align.method": "dpo", "pretrain.data_version": "ab" * 16, "pretrain.data.remote": "/remote"}
    assert aligned.as_tags() == base.as_tags() | extra


def test_tags_read_back_are_what_was_written_and_an_older_layout_reads_with_blanks(tiny_config):
    class Version:
        name, version, run_id = "foundry-gpt", "4", RUN
        tags = version_tags(tiny_config, RUN, DATA, "d", decision(), GIT, "models:/foundry-gpt/3").as_tags()

    read = registry_tags.read(Version)
    assert read == VersionTags.from_tags(Version.tags) and read.as_tags() == Version.tags
    older = VersionTags.from_tags({"data_version": DATA.data_version, "data.remote": "r", "git_commit": "c"})
    assert (older.run_id, older.parent_model, older.source_digest, older.git_dirty) == ("", "", None, None)
    assert older.as_tags() == {
        "run_id": "",
        "data_version": DATA.data_version,
        "data.remote": "r",
        "data.source": "",
        "git_commit": "c",
    }


def test_the_keys_built_from_a_name_and_the_one_tag_readers_are_the_literal_keys_versions_carry():
    """Built keys stay byte for byte the keys written before (`pretrain.data_version`, `foundry.export.hf`,
    `foundry.replaces_champion`); a reader says whether the version carries a tag (None) or carries it empty."""
    from foundry.core import version_tags as tag
    from foundry.core.version_tags import Publication, Tag

    assert (tag.pretrain(tag.DATA_VERSION), tag.pretrain(tag.DATA_REMOTE)) == (
        "pretrain.data_version",
        "pretrain.data.remote",
    )
    assert (tag.export("hf"), tag.replaces("champion")) == ("foundry.export.hf", "foundry.replaces_champion")
    carried = {
        "data_version": DATA.data_version,
        "data.remote": "",
        "pretrain.data_version": "0" * 32,
        "parent_model": "models:/m/1",
        "foundry.replaces_champion": "2",
        "foundry.export.gguf": "export/gguf/m/3/format-1",
        "foundry.purge": "purge-x",
        "config": "{}",
        "foundry.publication": "pending",
    }
    assert VersionTags.data_tags(carried) == (Tag("data_version", DATA.data_version), Tag("data.remote", ""))
    assert VersionTags.data_tags(carried, True) == (
        Tag("pretrain.data_version", "0" * 32),
        Tag("pretrain.data.remote", None),
    )
    assert (
        VersionTags.parent_tag(carried) == ("parent_model", "models:/m/1")
        and VersionTags.run_tag(carried).value is None
    )
    assert (
        VersionTags.replaced_tag(carried, "champion").value == "2"
        and VersionTags.replaced_tag(carried, "x").value is None
    )
    assert (
        VersionTags.export_of(carried, "gguf") == "export/gguf/m/3/format-1" and VersionTags.export_of({}, "hf") is None
    )
    assert (VersionTags.purge_of(carried), VersionTags.config_of(carried)) == ("purge-x", "{}")
    assert VersionTags.purge_of({}) is None and VersionTags.config_of({}) is None
    assert Publication.is_pending(carried) and not Publication.is_pending({"foundry.publication": "complete"})
    assert not Publication.is_pending({})


def test_every_data_version_and_remote_a_versions_or_runs_tags_name_is_read_by_its_key_ending():
    tags = {
        "data_version": "a" * 32,
        "pretrain.data_version": "b" * 32,
        "parent_data_version": "",
        "data.remote": "s3://one",
        "pretrain.data.remote": "s3://two",
        "data.source": "stdlib://x",
    }
    assert VersionTags.data_versions_named(tags) == ["a" * 32, "b" * 32]
    assert VersionTags.remotes_named(tags) == {"s3://one", "s3://two"}
