"""`foundry export --format hf` writes the version's run's energy as the card's `co2_eq_emissions` (grams at the
run's configured grid intensity); a run that recorded none gets no metadata. Against the session's embedded
MLflow, the energy recorded as a stage records it (`foundry.energy.tracked.record`)."""

from __future__ import annotations

import pytest
import torch
import yaml
from helpers_export import corpus_tokenizer, sharp_gpt
from helpers_registry import new_run

from foundry.cli import main
from foundry.config import EnergyConfig
from foundry.core.energy import ESTIMATE, Reading, StageEnergy
from foundry.core.run_tags import STAGE
from foundry.energy.tracked import record


def registered(tmp_path, run_id: str) -> str:
    from foundry.registry.versions import register
    from foundry.serving.package import log_model

    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json")
    model = sharp_gpt(tokenizer.get_vocab_size(), "learned")
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, tmp_path / "model.pt")
    uri = log_model(run_id, tmp_path / "model.pt", tmp_path / "tokenizer.json")
    name = f"export-energy-{tmp_path.name}"
    return f"models:/{name}/{register(uri, name, run_id, {})}"


def front_matter(readme: str) -> dict:
    assert readme.startswith("---\n"), readme[:200]
    return yaml.safe_load(readme.split("---\n")[1])


def test_the_cards_co2_is_the_runs_energy_at_its_grid_intensity(tmp_path):
    from foundry.runtime import tracking

    run_id = new_run("export-energy")
    tracking.set_tags(run_id, {STAGE: "finetune"})
    train = StageEnergy("train", Reading(7200.0, 60.0, ESTIMATE, 7200.0, 0.0, 720.0, 10.0), 1000, "token")
    record(run_id, tmp_path, train, EnergyConfig(grid_g_co2_per_kwh=250.0))
    assert main(["export", registered(tmp_path, run_id), "--format", "hf", "--out", str(tmp_path / "out")]) == 0
    emissions = front_matter((tmp_path / "out" / "README.md").read_text())["co2_eq_emissions"]
    assert emissions["emissions"] == pytest.approx(7200.0 / 3.6e6 * 250.0)  # 2 Wh at 250 g/kWh: 0.5 g
    assert emissions["training_type"] == "fine-tuning"
    assert ESTIMATE in emissions["source"] and "250 g CO2-eq/kWh" in emissions["source"]


def test_a_run_without_energy_has_no_metadata(tmp_path):
    assert (
        main(["export", registered(tmp_path, new_run("no-energy")), "--format", "hf", "--out", str(tmp_path / "o")])
        == 0
    )
    readme = (tmp_path / "o" / "README.md").read_text()
    assert readme.startswith("# models:/") and "co2_eq_emissions" not in readme
