"""The `energy` section: the figures a run's energy is estimated and converted with, set by the operator."""

from __future__ import annotations

from pydantic import Field

from foundry.config.base import _Section


class EnergyConfig(_Section):
    watts_per_core: float = Field(
        10.0,
        gt=0,
        description="Watts one busy CPU core draws, for the estimate where the CPU's energy counters (RAPL) cannot "
        "be read: joules = CPU seconds x this. About 4 on a many-core server CPU, 10 to 15 on a desktop one; a run "
        "so estimated says `estimate:cpu_time` and records its CPU seconds and this figure.",
    )
    grid_g_co2_per_kwh: float = Field(
        475.0,
        ge=0,
        description="Grams of CO2-equivalent per kWh of the grid the runs draw from, for the model card's and the "
        "Hugging Face card's co2_eq_emissions: set your grid's (the default is the world's 2019 average, IEA). "
        "Never looked up over the network.",
    )
    sample_every_s: float = Field(
        5.0,
        ge=0,
        description="Seconds between readings of RAPL's counters while a stage runs: a counter wraps after a few "
        "thousand joules, a wrap between two readings is added back, two are not. 0: at the start and the end only.",
    )
    plan_utilisation: float = Field(
        0.4,
        gt=0,
        le=1,
        description="Share of the peak FLOP/s a training step reaches, for `foundry plan`'s time and energy of a "
        "config before it runs (41% measured on an H200: bench/README.md, 'GPU: GPT-2 small').",
    )
