"""What `foundry reproduce` replays for an aligned version: the pretraining data its `pretrain.*` tags name, when
its training run's `align.replay_source` tag says it replayed that; a version that does not record it is refused
naming the tag, never re-trained without its replay (the flow through the CLI: tests/slow/align/test_align_flow.py).
The versions live in the session's embedded MLflow registry."""

from __future__ import annotations

import uuid

import pytest
from helpers_registry import register_tagged

from foundry.core.contracts import DataVersion
from foundry.registry.lineage import replayed_data
from foundry.registry.tags import BadTag

TEXT, OTHER = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
CHAT = "00112233445566778899aabbccddeeff"
ALIGNED = {"data_version": CHAT, "data.remote": "r", "align.method": "sft"}
PRETRAIN = {"pretrain.data_version": TEXT, "pretrain.data.remote": "r"}
REPLAYED = {"align.replay_source": TEXT}


@pytest.fixture()
def version(tiny_config):
    def register(tags: dict[str, str]):
        return register_tagged(tiny_config, f"replay-{uuid.uuid4().hex[:8]}", tags)

    return register


def test_an_aligned_version_replays_the_pretraining_data_its_tags_and_run_record(version, tiny_config, tmp_path):
    found = replayed_data(version(ALIGNED | PRETRAIN), tiny_config, REPLAYED, tmp_path)
    assert found == DataVersion(data_version=TEXT, remote="r")


def test_nothing_is_replayed_without_an_alignment_or_with_a_fraction_of_0(version, tiny_config, tmp_path):
    assert tiny_config.align.replay_fraction > 0  # the default: every default alignment replays
    assert replayed_data(version({"data_version": TEXT, "data.remote": "r"}), tiny_config, {}, tmp_path) is None
    unreplayed = tiny_config.model_copy(update={"align": tiny_config.align.model_copy(update={"replay_fraction": 0})})
    assert replayed_data(version(ALIGNED), unreplayed, {}, tmp_path) is None


@pytest.mark.parametrize(
    "tags, run_tags, named",
    [
        (ALIGNED, REPLAYED, "records no 'pretrain.data_version' tag"),
        (ALIGNED | {"pretrain.data_version": TEXT}, REPLAYED, "records no 'pretrain.data.remote' tag"),
        (ALIGNED | PRETRAIN, {}, "records no 'align.replay_source' tag"),
        (ALIGNED | PRETRAIN, {"align.replay_source": OTHER}, f"not the data its training run replayed.*{OTHER}"),
    ],
)
def test_an_aligned_version_that_does_not_record_what_it_replayed_is_refused_naming_the_tag(
    version, tiny_config, tmp_path, tags, run_tags, named
):
    with pytest.raises(BadTag, match=named):
        replayed_data(version(tags), tiny_config, run_tags, tmp_path)
