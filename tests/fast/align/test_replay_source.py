"""What SFT replays (`align.replay_fraction`) travels as a typed value beside the config, not inside it: to the
ranks in its own file, into the resume key by data version, and out of configs recorded when it was a key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from foundry.checkpointing.resume import resume_key
from foundry.config import ConfigError, FoundryConfig, as_recorded, load_config, validate
from foundry.core.contracts import DataVersion, Replay
from foundry.runtime.env import PROJECT_ROOT as REPO_ROOT
from foundry.training.launch import worker_args
from foundry.training.worker import build_parser


def replay_of(version: str, folder: str = "/home/hydrated") -> Replay:
    return Replay(data=DataVersion(data_version=version * 32, remote="/remote"), dir=Path(folder) / (version * 32))


def test_a_config_recorded_with_align_replay_from_loads_without_it():
    recorded = FoundryConfig().model_dump(mode="json")
    recorded["align"] |= {"replay_fraction": 0.25, "replay_from": "/home/x/hydrated/" + "b" * 32}
    with pytest.raises(ConfigError, match="align.replay_from: no longer a setting: the align flow hydrates"):
        validate(recorded)  # a config file written by an older `foundry config --defaults` is told what to do
    config = validate(as_recorded(recorded))
    assert config.align.replay_fraction == 0.25 and "replay_from" not in config.align.model_dump()
    assert "replay_from" in recorded["align"]  # the record itself is left as it was


def test_the_resume_key_follows_the_replayed_data_version_not_where_it_is_hydrated():
    config = load_config(REPO_ROOT / "configs" / "tiny.yaml", ["align.replay_fraction=0.25"])
    plain = resume_key(config, "v1")
    assert resume_key(config, "v1", None) == plain  # no replay: the key every earlier run had
    a = resume_key(config, "v1", replay_of("a"))
    assert a not in {plain, resume_key(config, "v1", replay_of("c"))}
    assert resume_key(config, "v1", replay_of("a", "/elsewhere")) == a
    other_share = load_config(REPO_ROOT / "configs" / "tiny.yaml", ["align.replay_fraction=0.5"])
    assert resume_key(other_share, "v1", replay_of("a")) != a


def test_every_rank_is_handed_the_replay_beside_the_config(tmp_path):
    config = load_config(None, ["align.replay_fraction=0.25"])
    source = replay_of("d")
    args = worker_args(config, tmp_path / "data", tmp_path / "ckpt", None, "v", None, source)
    parsed = build_parser().parse_args(args[2:])  # after `-m foundry.training.worker`
    assert Replay.read(parsed.replay) == source
    assert "replay_from" not in json.loads(parsed.config.read_text())["align"]
    plain = worker_args(config, tmp_path / "data", tmp_path / "plain", None, "v", None)
    assert build_parser().parse_args(plain[2:]).replay is None


def test_replayed_windows_are_drawn_from_the_replays_training_split(tiny_config, tiny_dataset):
    from foundry.align.training import replay_windows
    from foundry.data.manifest import DatasetManifest
    from foundry.pretrain.shards import load_split

    manifest = DatasetManifest.read(tiny_dataset)
    source = Replay(data=DataVersion(data_version="e" * 32, remote="/remote"), dir=tiny_dataset)
    x, _ = next(iter(replay_windows(tiny_config, manifest, source, 2, 0, 1)))
    block = tiny_config.model.block_size
    windows = np.lib.stride_tricks.sliding_window_view(load_split(tiny_dataset, "train"), block)
    assert x.shape == (2, block)
    assert all(bool((windows == row.numpy()).all(axis=1).any()) for row in x)
