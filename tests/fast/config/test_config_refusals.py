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
        ("train.preempt_grace_s=0", "train.preempt_grace_s"),  # no time to write the checkpoint
        ("train.preempt_grace_s=-.inf", "train.preempt_grace_s"),
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
    settings = ("train.max_steps=1000000000", "registry.model_name=a.b-c_1", "train.preempt_grace_s=0.5")
    assert main(["config", *(arg for s in settings for arg in ("--set", s))]) == 0
    out = capsys.readouterr().out
    assert "max_steps: 1000000000" in out and "preempt_grace_s: 0.5" in out
