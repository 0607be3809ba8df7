"""The energy a run used, per stage: measured where the machine tells it, else estimated and labelled so.

- `meter`: `EnergyMeter`, a context manager whose `reading` (`Reading`) adds NVML's GPU counters, RAPL's CPU
  counters (`/sys/class/powercap`) or, where no CPU counter is readable, the process tree's CPU time at a configured
  figure of watts per core
- `record`: a run's stages (`StageEnergy`, `RunEnergy`), their MLflow metrics and tags, their grams of CO2 at the
  operator's grid intensity, and the lines the model card, the summary and the Hugging Face card show
- `tracked`: a stage measured (`measured`) and recorded on its run: the run's `energy.json` and MLflow
- `plan`: `foundry plan`'s energy of a config before it runs, from its FLOPs and a power figure
"""
