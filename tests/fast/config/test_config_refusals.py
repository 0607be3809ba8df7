"""Config values that cannot train are refused when the config loads, before any work (#55 point 9): an infinite
or NaN rate would train to NaN weights; a step count past any run's length is a typo; a model name registration
refuses would only be refused after the whole training."""

from __future__ import annotations

import pytest

from foundry.cli import main


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("train.learning_rate=.inf", "train.learning_rate"),
        ("train.learning_rate=.nan", "train.learning_rate"),
        ("train.muon_learning_rate=-.inf", "train.muon_learning_rate"),
        ("train.max_steps=1.0e+23", "train.max_steps"),
        ("registry.model_name=a..b", "registry.model_name"),
    ],
)
def test_foundry_run_refuses_a_value_that_cannot_train_before_any_work(setting, named, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    assert main(["run", "--set", setting]) == 2
    assert named in capsys.readouterr().err
    assert not list((tmp_path / "home").rglob("*.db"))  # no MLflow or Prefect run was started


def test_values_at_their_bounds_still_load(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["config", "--set", "train.max_steps=1000000000", "--set", "registry.model_name=a.b-c_1"]) == 0
    assert "max_steps: 1000000000" in capsys.readouterr().out
