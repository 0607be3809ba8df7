"""foundry.core.energy: a run's stages added up, their MLflow metrics and tags, grams of CO2 at the grid's
intensity, the card's and the summary's lines, `energy.json` and the Hugging Face metadata from a run's record."""

from __future__ import annotations

import pytest

from foundry.core.energy import ESTIMATE, Reading, RunEnergy, StageEnergy, co2_eq_emissions, read_units, write_units

TRAIN = StageEnergy("train", Reading(720.0, 60.0, ESTIMATE, 720.0, 0.0, 72.0, 10.0), units=36_000, unit="token")
EVALUATE = StageEnergy("evaluate", Reading(3600.0, 10.0, "nvml+rapl", 600.0, 3000.0), units=0)


def test_a_runs_joules_and_grams_of_co2():
    run = RunEnergy().adding(TRAIN, 500.0).adding(EVALUATE, 500.0)
    assert run.joules == 4320.0
    assert run.co2_grams == pytest.approx(4320.0 / 3.6e6 * 500.0)  # 1.2 Wh at 500 g/kWh: 0.6 g
    assert run.estimated and run.methods == f"{ESTIMATE}+nvml+rapl"


def test_metrics_per_stage_and_for_the_run():
    metrics = RunEnergy().adding(TRAIN, 400.0).adding(EVALUATE, 400.0).metrics()
    assert metrics["energy/train/joules"] == 720.0
    assert metrics["energy/train/joules_per_token"] == pytest.approx(0.02)
    assert metrics["energy/train/cpu_seconds"] == 72.0  # the estimate's input
    assert metrics["energy/evaluate/joules"] == 3600.0 and "energy/evaluate/cpu_seconds" not in metrics
    assert metrics["energy/joules"] == 4320.0
    assert metrics["energy/joules_per_token"] == pytest.approx(4320.0 / 36_000)
    assert metrics["energy/co2_eq_g"] == pytest.approx(0.48)


def test_tags_name_each_method_and_the_estimates_inputs():
    tags = RunEnergy().adding(TRAIN, 475.0).adding(EVALUATE, 475.0).tags()
    assert tags["energy.train.method"] == ESTIMATE and tags["energy.train.watts_per_core"] == "10"
    assert tags["energy.evaluate.method"] == "nvml+rapl" and "energy.evaluate.watts_per_core" not in tags
    assert tags["energy.grid_g_co2_per_kwh"] == "475"


def test_a_stage_run_again_adds_to_its_namesake():
    run = RunEnergy().adding(TRAIN, 475.0).adding(TRAIN, 475.0)
    (stage,) = run.stages
    assert stage.reading.joules == 1440.0 and stage.reading.cpu_seconds == 144.0 and stage.units == 72_000
    assert stage.joules_per_unit == pytest.approx(0.02)


def test_card_and_summary_say_what_is_estimated_and_from_what(tmp_path):
    run = RunEnergy().adding(TRAIN, 475.0)
    section = run.card_section()
    assert section.startswith("\n## Energy\n")
    assert "720.0 J" in section and "(an estimate)" in section and "475 g/kWh" in section
    assert f"{ESTIMATE}: 72.0 CPU seconds x 10 W per core" in section
    assert "0.02 J per token" in section
    assert RunEnergy().card_section() == ""


def test_the_file_round_trips(tmp_path):
    run = RunEnergy().adding(TRAIN, 300.0).adding(EVALUATE, 300.0)
    run.write(tmp_path)
    assert RunEnergy.read(tmp_path) == run
    assert RunEnergy.read(tmp_path / "none") == RunEnergy()


def test_units_a_training_left(tmp_path):
    assert read_units(tmp_path) == (0, "")
    write_units(tmp_path, 4096, "token")
    assert read_units(tmp_path) == (4096, "token")


def test_hugging_face_metadata_from_a_runs_record():
    run = RunEnergy().adding(TRAIN, 475.0)
    emissions = co2_eq_emissions(run.metrics(), run.tags(), "pre-training")
    assert emissions["emissions"] == pytest.approx(720.0 / 3.6e6 * 475.0, abs=1e-6)
    assert emissions["training_type"] == "pre-training"
    assert "estimated from CPU time" in emissions["source"] and "475 g CO2-eq/kWh" in emissions["source"]
    assert co2_eq_emissions({}, {}, "pre-training") is None


def test_the_summaries_print_the_energy_and_leave_it_out_when_none_was_measured(tmp_path):
    from foundry.core.contracts import AlignResult
    from foundry.core.metrics.aligned import AlignmentMetrics
    from foundry.reports.summaries import align_summary

    metrics = AlignmentMetrics.model_validate({"base": {"response_loss": 2.0}, "aligned": {"response_loss": 1.0}})
    values = dict(run_id="r1", model_name="c", model_version="1", data_version="d" * 32, parent="models:/g/1")
    values |= dict(method="sft", metrics=metrics, promoted=False, verdict="v")
    measured = align_summary(AlignResult(**values, energy=RunEnergy().adding(TRAIN, 475.0)))
    assert "energy     720.0 J" in measured and "train: 720.0 J in 60.0 s, 0.02 J per token" in measured
    assert "energy" not in align_summary(AlignResult(**values))
