"""Training in a few steps: one process in-process and the checkpoint it leaves, where each rank stands, and the
settings. Several ranks as real processes, exact resume, failures and compiled training twice:
tests/slow/training/test_train_processes.py; the train task's retries: tests/slow/training/test_train_retries.py."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from helpers_configs import tiny
from helpers_training import digest

from foundry.checkpointing.manifest import read_manifest
from foundry.config import ConfigError
from foundry.core.workload import named
from foundry.pretrain.training import vocabulary_only
from foundry.runtime.arithmetic import resolve_precision
from foundry.runtime.cpu_features import bf16_in_flags, cpu_has_bf16
from foundry.training.launch import launch
from foundry.training.trainer import build_module, lookup_peak_flops, weights_digest
from foundry.training.worker import node_layout
from models.gpt import load_gpt

# --- where each rank stands ----------------------------------------------------------------------


def test_node_layout_is_lightnings_under_one_local_agent_and_under_torchrun_per_node():
    """Lightning numbers a rank node * devices + local; the worker sets NODE_RANK and LOCAL_RANK so it agrees."""
    nodes, devices = 2, 2
    local = [{"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(4)]
    per_node = [  # torchrun on each node: RANK = GROUP_RANK * nproc_per_node + LOCAL_RANK
        {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": str(g), "RANK": str(2 * g + d), "LOCAL_RANK": str(d)}
        for g in range(nodes)
        for d in range(devices)
    ]
    for envs in (local, per_node):
        layouts = [node_layout(env, devices, nodes) for env in envs]
        assert [(int(x["NODE_RANK"]), int(x["LOCAL_RANK"])) for x in layouts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for env in per_node:  # on a cluster it repeats what torchrun set
        assert node_layout(env, devices, nodes) == {"NODE_RANK": env["GROUP_RANK"], "LOCAL_RANK": env["LOCAL_RANK"]}
    with pytest.raises(ValueError, match="4 ranks started, but the config asks for 3 nodes x 2 devices"):
        node_layout(local[0], devices, 3)
    with pytest.raises(ValueError, match="torchrun started 4 processes per node; train.devices is 3"):
        node_layout({**local[0], "WORLD_SIZE": "6"}, 3, 2)


# --- one process ---------------------------------------------------------------------------------


def test_single_process_trains_and_the_checkpoint_rebuilds_the_model(tiny_dataset, tmp_path):
    config = tiny("train.max_steps=12", "checkpoint.every_n_steps=5")
    path = launch(config, tiny_dataset, tmp_path / "ckpt", None, "v-test")
    model = load_gpt(path)
    saved = torch.load(path, weights_only=True)
    assert saved["data_version"] == "v-test" and saved["config"]["train"]["max_steps"] == 12
    assert model.config.n_embd == config.model.n_embd
    # Every 5 steps and at the end; the last two kept; last.ckpt is the newest.
    assert [e.step for e in read_manifest(tmp_path / "ckpt")] == [10, 12]
    assert (tmp_path / "ckpt" / "last.ckpt").samefile(tmp_path / "ckpt" / "step-000012.ckpt")
    assert (tmp_path / "ckpt" / "weights.rank0.sha256").read_text().strip() == digest(path)


def test_the_run_is_tagged_with_the_host_of_each_rank(tiny_dataset, tmp_path, monkeypatch):
    """`train.hosts`: the SLURM node where SLURM started the rank (several share a machine on
    infra/slurm/local-cluster.sh), else the machine; two ranks on two nodes: tests/slow/cluster/test_slurm.py."""
    import socket

    from mlflow import MlflowClient

    from foundry.runtime import tracking
    from foundry.training.hosts import rank_hosts

    assert rank_hosts() == [socket.gethostname()]
    config = tiny("train.max_steps=2", "checkpoint.every_n_steps=2", "train.peak_flops=1e11")  # no CPU peak measured
    run_id = tracking.start_pipeline_run(config)
    monkeypatch.setenv("SLURMD_NODENAME", "node7")
    launch(config, tiny_dataset, tmp_path / "ckpt", run_id, "v-test")
    assert MlflowClient().get_run(run_id).data.tags["train.hosts"] == "node7"


def test_a_fresh_training_over_another_runs_folder_replaces_its_checkpoints(tiny_dataset, tmp_path, caplog):
    """Started afresh (no resume point) where another training left later checkpoints: they go, its own stay."""
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    folder = tmp_path / "ckpt"
    launch(tiny("train.max_steps=12", "checkpoint.every_n_steps=5"), tiny_dataset, folder, None, "v-test")
    assert [e.step for e in read_manifest(folder)] == [10, 12]
    config = tiny("train.max_steps=6", "checkpoint.every_n_steps=5", "train.seed=7")
    train(config, TrainingRun(tiny_dataset, folder), progress=False)
    assert [e.step for e in read_manifest(folder)] == [5, 6]
    assert sorted(p.name for p in folder.glob("*.ckpt")) == ["last.ckpt", "step-000005.ckpt", "step-000006.ckpt"]
    assert (folder / "last.ckpt").samefile(folder / "step-000006.ckpt")
    assert "step-000010.ckpt, step-000012.ckpt" in caplog.text


def test_a_parent_trained_with_other_model_settings_is_refused_before_training(tiny_dataset, tmp_path):
    """Other heads or QK-norm leave the weights' names and shapes as they are: loading them would succeed and train
    another function. The warm start names the settings instead, and writes no checkpoint; so does DPO's frozen
    reference, the same parent, which it loads first."""
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    parent = launch(tiny("train.max_steps=2"), tiny_dataset, tmp_path / "parent", None, "v-test")
    for setting, parents, ours in (("n_head", 2, 4), ("qk_norm", False, True), ("n_embd", 32, 64), ("mtp_depth", 0, 1)):
        config = tiny(f"train.init_from={parent}", "train.max_steps=2", f"model.{setting}={str(ours).lower()}")
        with pytest.raises(ValueError, match=re.escape(f"{{'{setting}': ({parents}, {ours})}}")):
            train(config, TrainingRun(tiny_dataset, tmp_path / setting), progress=False)
        assert not list((tmp_path / setting).glob("*.ckpt"))
        with pytest.raises(ValueError, match=re.escape(f"{{'{setting}': ({parents}, {ours})}}")):  # DPO's reference
            build_module(config, named("chat"), vocabulary_only(config.tokenizer.vocab_size, "preference"))
    same = tiny(f"train.init_from={parent}", "train.max_steps=2")
    assert load_gpt(launch(same, tiny_dataset, tmp_path / "same", None, "v-test")).config == load_gpt(parent).config


def test_deterministic_switch_reaches_torch(tmp_path, monkeypatch):
    from foundry.checkpointing.writer import ManifestCheckpointIO
    from foundry.training.trainer import Progress, _trainer

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")  # Lightning sets it; restored after the test
    io = ManifestCheckpointIO(tmp_path, 1)
    try:
        _trainer(tiny("train.deterministic=true"), None, io, Progress(bar=False), units=set())
        assert (
            torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
        )
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        _trainer(tiny("train.deterministic=warn"), None, io, Progress(bar=False), units=set())
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        _trainer(tiny(), None, io, Progress(bar=False), units=set())
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


# --- settings --------------------------------------------------------------------------------------


def test_a_cpu_peak_is_measured_once_then_read_from_its_cache(tmp_path):
    """MFU on a CPU: the rate of a dense matmul on the rank's threads, measured once per CPU, threads and dtype."""
    from foundry.training.cpu_peak import CACHE, cpu_peak_flops

    assert cpu_peak_flops(1, "32-true", tmp_path) > 1e8
    (key,) = json.loads((tmp_path / CACHE).read_text())
    assert "1 threads | float32" in key
    (tmp_path / CACHE).write_text(json.dumps({key: 1234.0}))
    assert cpu_peak_flops(1, "32-true", tmp_path) == 1234.0  # read back, not measured again
    assert cpu_peak_flops(1, "bf16-mixed", tmp_path) != 1234.0  # another dtype is measured on its own
    assert len(json.loads((tmp_path / CACHE).read_text())) == 2


def test_peak_flops_are_looked_up_by_device_name():
    assert lookup_peak_flops("NVIDIA H200", "bf16-mixed") == 989e12
    assert lookup_peak_flops("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989e12
    assert lookup_peak_flops("NVIDIA H100 PCIe", "bf16-mixed") == 756e12
    assert lookup_peak_flops("NVIDIA A100-SXM4-80GB", "32-true") == 19.5e12
    assert lookup_peak_flops("Some CPU", "bf16-mixed") == 0.0


def test_precision_auto_is_bf16_on_gpu_and_fp32_on_cpu():
    assert resolve_precision(tiny("train.accelerator=cpu", "train.precision=auto").train) == "32-true"
    assert resolve_precision(tiny("train.accelerator=gpu", "train.precision=auto").train) == "bf16-mixed"
    assert resolve_precision(tiny("train.accelerator=gpu", "train.precision=32-true").train) == "32-true"


def test_auto_is_fp32_on_any_cpu_as_configs_recorded_with_it_trained():
    auto = tiny("train.precision=auto").train
    assert auto.resolved_precision(on_gpu=False, cpu_bf16=True) == "32-true"
    assert auto.resolved_precision(on_gpu=True, cpu_bf16=False) == "bf16-mixed"


def test_bf16_if_native_is_bf16_on_a_gpu_and_on_a_cpu_with_bf16_instructions_only():
    train = tiny("train.precision=bf16-if-native").train
    assert train.resolved_precision(on_gpu=True, cpu_bf16=False) == "bf16-mixed"
    assert train.resolved_precision(on_gpu=False, cpu_bf16=True) == "bf16-mixed"
    assert train.resolved_precision(on_gpu=False, cpu_bf16=False) == "32-true"
    assert resolve_precision(train) == ("bf16-mixed" if cpu_has_bf16() else "32-true")  # here, by this CPU


def test_bf16_instructions_are_read_from_the_cpus_flags():
    def cpuinfo(flags: str) -> str:
        return f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: fpu sse2 {flags}\n\n"

    assert bf16_in_flags(cpuinfo("avx2 avx512f avx512_bf16"))
    assert bf16_in_flags(cpuinfo("avx2 amx_bf16 amx_tile"))
    assert not bf16_in_flags(cpuinfo("avx2 avx512f avx512_vnni"))
    assert not bf16_in_flags("model name\t: avx512_bf16 in a name is not a flag\n")
    torch_reads = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert cpu_has_bf16() == torch_reads


def test_fsdp_keeps_full_state_dicts_and_runs_on_gpus_as_lightning_has_it_and_on_cpu_ranks():
    from lightning.pytorch.strategies import FSDPStrategy

    from foundry.training.sharding import CpuFSDPStrategy
    from foundry.training.trainer import _strategy
    from models.gpt import Block

    with pytest.raises(ConfigError, match="optimizer muon needs whole matrices"):
        tiny("train.strategy=fsdp", "train.optimizer=muon")
    sharded = ("train.strategy=fsdp", "train.optimizer=adamw", "train.collective_timeout_s=42")
    strategy = _strategy(tiny(*sharded, "train.accelerator=gpu").train, {Block})
    assert type(strategy) is FSDPStrategy and strategy._state_dict_type == "full"
    assert strategy._timeout.total_seconds() == 42
    assert type(_strategy(tiny(*sharded).train, {Block})) is CpuFSDPStrategy  # accelerator cpu: gloo ranks


def test_fsdp_wraps_each_block_of_a_gpt_or_vit_and_a_cnn_whole():
    from models.gpt import Block as TextBlock
    from models.vision import Block as VisionBlock
    from models.vision import ImageClassifier, VisionConfig

    assert named("text").fsdp_units(build_module(tiny(), named("text"), vocabulary_only(512))) == {TextBlock}
    vit = ImageClassifier(VisionConfig(num_classes=3, arch="vit", image_size=8, n_layer=1, n_embd=16))
    assert named("image").fsdp_units(vit) == {VisionBlock}
    assert named("image").fsdp_units(ImageClassifier(VisionConfig(num_classes=3, widths=(4,)))) == set()


def test_a_compiled_model_on_a_cpu_gets_deterministic_kernels():
    """Without deterministic kernels two compiled trainings of the defaults differed after 60 steps (Inductor adds
    the embedding's gradient atomically otherwise); with them `bench/determinism.py` gives the same weights."""
    assert tiny("train.compile=true").train.deterministic_kernels(on_gpu=False) is True
    assert tiny("train.compile=false").train.deterministic_kernels(on_gpu=False) is False
    assert tiny("train.compile=true", "train.deterministic=warn").train.deterministic_kernels(on_gpu=False) == "warn"
    assert tiny("train.compile=true").train.deterministic_kernels(on_gpu=True) is False


def test_compile_keeps_parameter_names():
    text = vocabulary_only(512)
    plain, compiled = (build_module(tiny(f"train.compile={flag}"), named("text"), text) for flag in ("false", "true"))
    assert list(compiled.state_dict()) == list(plain.state_dict())


def test_weights_digest_sees_one_flipped_bit():
    state = {"a": torch.arange(6, dtype=torch.float32).view(2, 3), "b": torch.ones(2, dtype=torch.bfloat16)}
    same = {k: v.clone() for k, v in state.items()}
    assert weights_digest(state) == weights_digest(same)
    same["a"].view(torch.int32)[0, 0] ^= 1
    assert weights_digest(state) != weights_digest(same)


# --- no C++ compiler -----------------------------------------------------------------------------


@pytest.fixture
def no_cxx_compiler():
    """Inductor's search finds no compiler, as on `python:3.11-slim`: it looks for $CXX, else g++ (read when
    Inductor is imported; here its setting, which the search takes, is pointed at nothing)."""
    from torch._inductor import config as inductor

    with inductor.patch({"cpp.cxx": (None, "/nonexistent/g++")}):
        yield


def test_without_a_compiler_a_compiled_config_trains_uncompiled_and_says_so(
    no_cxx_compiler, tiny_dataset, tmp_path, caplog, home
):
    import mlflow

    from foundry.core import run_tags
    from foundry.runtime.arithmetic import arithmetic, compiles

    config = tiny("train.compile=true", "train.max_steps=4", "checkpoint.every_n_steps=2")
    assert not compiles(config.train) and arithmetic(config.train)["compile"] is False  # its own resume key
    with caplog.at_level("WARNING", logger="foundry.training.trainer"):
        module = build_module(config, named("text"), vocabulary_only(64))
    assert module.model._compiled_call_impl is None
    assert "no C++ compiler was found" in caplog.text and "training uncompiled" in caplog.text
    with mlflow.start_run() as run:
        path = launch(config, tiny_dataset, tmp_path / "ckpt", run.info.run_id, "v-test")
    assert load_gpt(path).config.n_embd == config.model.n_embd
    assert mlflow.get_run(run.info.run_id).data.tags[run_tags.COMPILED] == "false"  # what a reproduction reads


def test_with_a_compiler_a_compiled_config_compiles(tiny_dataset):
    from foundry.runtime.arithmetic import arithmetic, compiles

    config = tiny("train.compile=true")
    assert compiles(config.train) and arithmetic(config.train)["compile"] is True  # the key runs had before
    assert build_module(config, named("text"), vocabulary_only(64)).model._compiled_call_impl is not None
    assert not compiles(tiny("train.compile=false").train)
