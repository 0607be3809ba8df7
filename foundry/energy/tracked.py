"""A stage's energy on its run: measured around the stage (`metered`), added to the run's `energy.json`, logged as
the run's MLflow metrics and tags (`foundry.core.energy`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from foundry.config import EnergyConfig
from foundry.core.contracts import RunContext
from foundry.core.energy import RunEnergy, StageEnergy
from foundry.energy.meter import EnergyMeter


@contextmanager
def metered(energy: EnergyConfig) -> Iterator[EnergyMeter]:
    """An `EnergyMeter` with the config's watts per core and sampling interval; its reading once the block ends."""
    with EnergyMeter(energy.watts_per_core, sample_every_s=energy.sample_every_s) as meter:
        yield meter


def record(run_id: str, folder: Path, stage: StageEnergy, energy: EnergyConfig) -> RunEnergy:
    """`stage` added to the run's energy in `folder` (its `energy.json`) and logged on MLflow run `run_id`: the
    stage's metrics, the run's totals and how each was found."""
    from foundry.runtime import tracking

    run = RunEnergy.read(folder).adding(stage, energy.grid_g_co2_per_kwh)
    run.write(folder)
    tracking.log_metrics(run_id, run.metrics())
    tracking.set_tags(run_id, run.tags())
    return run


def _uncounted() -> tuple[int, str]:
    return 0, ""


@contextmanager
def measured(
    run: RunContext, stage: str, energy: EnergyConfig, units: Callable[[], tuple[int, str]] = _uncounted
) -> Iterator[None]:
    """The block's energy recorded on `run` as `stage` once it ends without an error; `units()`: the (count, unit)
    it processed, asked then."""
    with metered(energy) as meter:
        yield
    record(run.run_id, run.dir, StageEnergy(stage, meter.reading, *units()), energy)
