"""The energy a run used, per stage: measured where the machine tells it, else estimated and labelled so.

- `meter`: `EnergyMeter`, a context manager whose `reading` adds NVML's GPU counters, RAPL's CPU counters
  (`/sys/class/powercap`) or, where no CPU counter is readable, the process tree's CPU time at a configured figure
  of watts per core
- `tracked`: a stage measured (`measured`) and recorded on its run: the run's `energy.json` and MLflow

What a reading and a run's stages are, their metrics, CO2 and the lines the card and the summary show, is the core's
(`foundry.core.energy`): the stages' results carry it. `foundry plan`'s estimate before a run is the training's
(`foundry.training.energy_plan`).
"""
