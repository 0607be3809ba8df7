"""Replay against forgetting: pretraining windows beside the packed conversations (SFT) or the preference pairs
(DPO) of every batch, and their next-token loss in DPO's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_align import assert_resumes_exactly, many_conversations

from foundry.align.training import replayed_rows
from foundry.config import load_config
from foundry.core.contracts import DataVersion, Replay
from models.align import IGNORE
from models.align_data import PackedConversations, WithReplay
from models.data import RandomWindows, RankDraw

PRETRAINING = np.arange(100, 160, dtype=np.uint16)  # ids no conversation holds: a replayed row is plain to see


def replaying(batch_size: int = 3, replay_rows: int = 1, windows_per_epoch: int = 2) -> WithReplay:
    conversations = PackedConversations(many_conversations(), 16, batch_size, 7, 0)
    return WithReplay(conversations, RandomWindows(PRETRAINING, 16, replay_rows, RankDraw(3, windows_per_epoch)))


def test_each_batch_is_its_conversations_then_whole_pretraining_windows_every_token_trained():
    batches = list(replaying())
    assert len(batches) == len(replaying().batches)
    for x, y, segments in batches:
        assert x.shape == y.shape == segments.shape == (4, 16)
        conversations, window = slice(0, 3), 3
        assert int(x[conversations].max()) < 100 and int(x[window].min()) >= 100
        torch.testing.assert_close(y[window, :-1], x[window, 1:])  # the next token, at every position
        assert bool((y[window] != IGNORE).all()) and bool((segments[window] == 0).all())  # one segment, all trained
        assert bool((y[conversations] == IGNORE).any())  # prompts stay masked in the conversations' rows


def test_replay_resumes_where_both_streams_were_also_across_the_windows_epochs():
    # Two windows an epoch: the windows start a new epoch inside the conversations' epoch.
    assert_resumes_exactly(replaying)


def config_with(*overrides: str):
    return load_config(None, list(overrides))


SOURCE = Replay(data=DataVersion(data_version="a" * 32, remote="/remote"), dir=Path("/x"))


@pytest.mark.parametrize(
    ("overrides", "replay", "kind", "message"),
    [
        (["align.replay_fraction=0.25"], None, "chat", "align.replay_fraction > 0 needs the pretraining data"),
        (["align.replay_fraction=0.25"], None, "preference", "align.replay_fraction > 0 needs the pretraining data"),
        (["align.replay_fraction=0.99", "train.batch_size=8"], SOURCE, "chat", "leaves none for conversations"),
        (["align.replay_fraction=0.99", "train.batch_size=8"], SOURCE, "preference", "leaves none for preference"),
    ],
)
def test_replay_that_cannot_work_is_refused_naming_the_setting(overrides, replay, kind, message):
    with pytest.raises(ValueError, match=message):
        replayed_rows(config_with(*overrides), kind, replay)


def test_replayed_rows_are_the_share_of_the_batch_at_least_one():
    assert replayed_rows(config_with("align.replay_fraction=0", "train.batch_size=32"), "chat", None) == 0
    share = config_with("align.replay_fraction=0.25", "train.batch_size=32")
    assert replayed_rows(share, "chat", SOURCE) == replayed_rows(share, "preference", SOURCE) == 8
    tiny = config_with("align.replay_fraction=0.01", "train.batch_size=8")
    assert replayed_rows(tiny, "chat", SOURCE) == 1


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_the_flow_refuses_replay_for_a_version_without_a_pretraining_data_version(method, tmp_path):
    from foundry.core.contracts import ParentModel, SourceManifest
    from tasks.align import replay_source

    parent = ParentModel(
        uri="models:/x/1",
        weights="w",
        tokenizer="t",
        config={},
        source_manifest=SourceManifest(source="s", digest="d", files=0, bytes=0, entries=[]),
    )
    # The default replays a quarter: refused, naming the fix, rather than trained into a gate it cannot pass.
    with pytest.raises(ValueError, match="models:/x/1 records none .* set align.replay_fraction=0"):
        replay_source.fn(config_with(f"align.method={method}"), parent, tmp_path)
    without = config_with(f"align.method={method}", "align.replay_fraction=0")
    assert replay_source.fn(without, parent, tmp_path) is None  # nothing hydrated
