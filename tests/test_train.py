"""Training: one process in-process, several as real processes with the rendezvous variables."""

from __future__ import annotations

import pytest
import torch

from tasks.launch import TrainingFailed, launch, launch_local, rank_environments
from tasks.train import load_model


def test_rank_environments_follow_node_major_order(tiny_config):
    config = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(update={"num_nodes": 2, "devices": 2})})
    envs = rank_environments(config, 29500)
    assert [(e["NODE_RANK"], e["LOCAL_RANK"], e["RANK"]) for e in envs] == [
        ("0", "0", "0"), ("0", "1", "1"), ("1", "0", "2"), ("1", "1", "3")]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"} and {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}


def test_single_process_trains_and_the_checkpoint_rebuilds_the_model(tiny_config, tiny_dataset, tmp_path):
    config = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(update={"max_steps": 12})})
    path = launch(config, tiny_dataset, tmp_path / "ckpt", None, "v-test")
    model = load_model(path)
    saved = torch.load(path, weights_only=True)
    assert saved["data_version"] == "v-test" and saved["config"]["train"]["max_steps"] == 12
    assert model.config.n_embd == config.model.n_embd
    assert (tmp_path / "ckpt" / "last.ckpt").is_file()


@pytest.mark.slow
def test_two_nodes_on_localhost_train_with_gloo(tiny_config, tiny_dataset, tmp_path):
    config = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(update={"num_nodes": 2, "max_steps": 8})})
    path = launch_local(config, tiny_dataset, tmp_path / "ckpt", None, "v-ddp")
    assert load_model(path).config.vocab_size > 256


@pytest.mark.slow
def test_a_failing_rank_is_named(tiny_config, tmp_path):
    config = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(update={"num_nodes": 2})})
    with pytest.raises(TrainingFailed, match=r"rank \d of 2 exited with code"):
        launch_local(config, tmp_path / "no-such-dataset", tmp_path / "ckpt", None, "v")
