"""Energy per run (#59) on the session's tiny pipeline run (`base_model`): each stage's joules in MLflow, the run's
total, the method and the estimate's inputs, the model card's section and the summary's lines. This machine has no
RAPL and no GPU: the figures are the estimate from CPU time, and say so."""

from __future__ import annotations

import pytest

from foundry.core.energy import ESTIMATE


@pytest.fixture(scope="module")
def first_run(base_model):
    return base_model


def test_each_stage_records_its_energy_on_the_run(first_run):
    from mlflow import MlflowClient

    config, result = first_run
    data = MlflowClient().get_run(result.run_id).data
    metrics, tags = data.metrics, data.tags
    assert metrics["energy/joules"] > 0
    assert metrics["energy/train/joules"] > 0 and metrics["energy/evaluate/joules"] > 0
    assert metrics["energy/joules"] == pytest.approx(metrics["energy/train/joules"] + metrics["energy/evaluate/joules"])
    assert metrics["energy/train/joules_per_token"] > 0 and metrics["energy/joules_per_token"] > 0
    assert tags["energy.train.method"] == ESTIMATE  # no RAPL, no NVML here
    assert tags["energy.train.watts_per_core"] == f"{config.energy.watts_per_core:g}"
    watts = config.energy.watts_per_core
    assert metrics["energy/train/joules"] == pytest.approx(metrics["energy/train/cpu_seconds"] * watts)
    grams = metrics["energy/joules"] / 3.6e6 * config.energy.grid_g_co2_per_kwh
    assert metrics["energy/co2_eq_g"] == pytest.approx(grams)


def test_the_tokens_per_joule_are_the_tokens_trained(first_run):
    from mlflow import MlflowClient

    config, result = first_run
    metrics = MlflowClient().get_run(result.run_id).data.metrics
    t = config.train
    tokens = t.max_steps * t.batch_size * t.grad_accum_steps * t.devices * config.model.block_size
    assert metrics["energy/train/joules"] / metrics["energy/train/joules_per_token"] == pytest.approx(tokens)


def test_the_card_and_the_summary_show_it(first_run, foundry_home):
    from mlflow import MlflowClient

    from foundry.reports.summaries import pipeline_summary

    _, result = first_run
    card = MlflowClient().get_model_version("it-gpt", result.model_version).description
    energy = card.split("## Energy\n", 1)[1]
    assert "(an estimate)" in energy and "- train: " in energy and "- evaluate: " in energy
    assert f"{ESTIMATE}: " in energy and "CPU seconds x" in energy
    assert result.energy.joules > 0 and [s.stage for s in result.energy.stages] == ["train", "evaluate"]
    summary = pipeline_summary(result, foundry_home)
    assert "energy     " in summary and "J per token" in summary
