"""foundry.training.energy_plan: a training's FLOPs as the model counts them, its time and energy from a peak and a power
figure, and `foundry plan`'s lines."""

from __future__ import annotations

import pytest
from conftest import REPO_ROOT

from foundry.cli import main
from foundry.config import load_config
from foundry.training.energy_plan import board_watts, flops_per_token, plan, training_tokens
from models.gpt import GPT, GPTConfig


def tiny(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", list(overrides))


@pytest.mark.parametrize("overrides", [(), ("model.mtp_depth=1", "model.positions=rotary")])
def test_flops_per_token_are_the_models_own_count(overrides):
    config = tiny(*overrides)
    m = config.model
    model = GPT(
        GPTConfig(
            vocab_size=config.tokenizer.vocab_size,
            **{k: getattr(m, k) for k in GPTConfig.__dataclass_fields__ if k != "vocab_size" and hasattr(m, k)},
        )
    )
    assert flops_per_token(config) == pytest.approx(model.flops_per_token())


def test_time_and_energy_on_a_cpu():
    config = tiny("train.max_steps=10", "train.batch_size=4", "train.cpu_threads=2", "train.devices=1")
    config = config.with_keys(energy={"watts_per_core": 5.0, "plan_utilisation": 0.5})
    assert training_tokens(config) == 10 * 4 * config.model.block_size * config.train.grad_accum_steps
    energy = plan(config, peak_flops=1e10, on_gpu=False)
    assert energy.flops == flops_per_token(config) * training_tokens(config)
    assert energy.flops_per_s == 5e9  # half of the peak
    assert energy.watts == 10.0  # 2 cores x 5 W
    assert energy.joules == pytest.approx(energy.flops / 5e9 * 10.0)


def test_a_gpu_by_its_data_sheet_and_an_unknown_one_not_at_all():
    config = tiny("train.accelerator=gpu", "train.devices=2")
    energy = plan(config, peak_flops=989e12, on_gpu=True, device_name="NVIDIA H100 80GB HBM3")
    assert energy.watts == 1400.0 and energy.flops_per_s == pytest.approx(989e12 * 0.4 * 2)
    assert board_watts("NVIDIA H100 PCIe") == 350.0
    assert plan(config, peak_flops=1e14, on_gpu=True, device_name="Some GPU") is None


def test_foundry_plan_prints_time_and_energy(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path))
    assert main(["plan", "--config", str(REPO_ROOT / "configs" / "tiny.yaml"), "--set", "train.peak_flops=1e10"]) == 0
    out = capsys.readouterr().out
    assert "time         ~" in out and "energy       ~" in out and "energy.watts_per_core" in out
