"""A run's energy, stage by stage (`RunEnergy` of `StageEnergy`, each a meter's `Reading`: `foundry.energy.meter`),
as its MLflow metrics and tags, its grams of CO2, and the lines the model card, the summary and the Hugging Face card
show. It lives in `energy.json` in the run's folder, where each stage adds itself (`foundry.energy.tracked`); a stage
that runs twice (a retried training) adds both runs. Here, in the core, because the flows' results carry it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ESTIMATE = "estimate:cpu_time"  # the method of a reading estimated from CPU time (`foundry.energy.meter`)
FILE = "energy.json"
UNITS_FILE = "trained_units.json"  # beside a training's checkpoints: what its ranks processed
JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Reading:
    """What a meter measured: `joules` in all over `seconds` of wall time; `method` the sources added (`+`);
    `cpu_seconds` and `watts_per_core` the estimate's inputs (0 when the CPU was measured, not estimated);
    `gpu_joules`/`cpu_joules` the two parts."""

    joules: float
    seconds: float
    method: str
    cpu_joules: float = 0.0
    gpu_joules: float = 0.0
    cpu_seconds: float = 0.0
    watts_per_core: float = 0.0

    @property
    def estimated(self) -> bool:
        return ESTIMATE in self.method


@dataclass(frozen=True)
class StageEnergy:
    """One stage's `reading`, and the `units` it processed (`unit`: "token", "image"; 0 when not counted)."""

    stage: str
    reading: Reading
    units: int = 0
    unit: str = ""

    @property
    def joules_per_unit(self) -> float | None:
        return self.reading.joules / self.units if self.units else None

    def plus(self, other: StageEnergy) -> StageEnergy:
        """This stage run again (a retry): the joules, seconds, CPU seconds and units of both."""
        a, b = self.reading, other.reading
        methods = "+".join(dict.fromkeys(a.method.split("+") + b.method.split("+")))
        both = Reading(
            a.joules + b.joules,
            a.seconds + b.seconds,
            methods,
            a.cpu_joules + b.cpu_joules,
            a.gpu_joules + b.gpu_joules,
            a.cpu_seconds + b.cpu_seconds,
            b.watts_per_core or a.watts_per_core,
        )
        return replace(self, reading=both, units=self.units + other.units, unit=self.unit or other.unit)

    def metrics(self) -> dict[str, float]:
        """`energy/<stage>/joules`, `.../seconds`, `.../joules_per_<unit>` when counted, `.../cpu_seconds` when
        estimated from them."""
        r, key = self.reading, f"energy/{self.stage}"
        metrics = {f"{key}/joules": r.joules, f"{key}/seconds": r.seconds}
        if self.joules_per_unit is not None:
            metrics[f"{key}/joules_per_{self.unit}"] = self.joules_per_unit
        if r.estimated:
            metrics[f"{key}/cpu_seconds"] = r.cpu_seconds
        return metrics

    def tags(self) -> dict[str, str]:
        """`energy.<stage>.method`, and the estimate's watts per core when it is one."""
        tags = {f"energy.{self.stage}.method": self.reading.method}
        if self.reading.estimated:
            tags[f"energy.{self.stage}.watts_per_core"] = f"{self.reading.watts_per_core:g}"
        return tags

    def line(self) -> str:
        r = self.reading
        per = f", {self.joules_per_unit:.3g} J per {self.unit}" if self.joules_per_unit is not None else ""
        how = (
            f"{r.method}: {r.cpu_seconds:.1f} CPU seconds x {r.watts_per_core:g} W per core"
            + (f" + {r.gpu_joules:,.1f} J of GPU (nvml)" if r.gpu_joules else "")
            if r.estimated
            else f"measured, {r.method}"
        )
        return f"{self.stage}: {r.joules:,.1f} J in {r.seconds:,.1f} s{per} ({how})"


@dataclass(frozen=True)
class RunEnergy:
    """Every stage a run measured, in order, and the grid's grams of CO2-equivalent per kWh it is converted at."""

    stages: tuple[StageEnergy, ...] = ()
    grid_g_co2_per_kwh: float = 0.0

    @property
    def joules(self) -> float:
        return sum(s.reading.joules for s in self.stages)

    @property
    def co2_grams(self) -> float:
        return self.joules / JOULES_PER_KWH * self.grid_g_co2_per_kwh

    @property
    def estimated(self) -> bool:
        return any(s.reading.estimated for s in self.stages)

    @property
    def methods(self) -> str:
        return "+".join(dict.fromkeys(m for s in self.stages for m in s.reading.method.split("+")))

    def adding(self, stage: StageEnergy, grid_g_co2_per_kwh: float) -> RunEnergy:
        """With `stage` added: after the others, or into its namesake (a stage run again)."""
        stages = [s.plus(stage) if s.stage == stage.stage else s for s in self.stages]
        if all(s.stage != stage.stage for s in self.stages):
            stages.append(stage)
        return RunEnergy(tuple(stages), grid_g_co2_per_kwh)

    def metrics(self) -> dict[str, float]:
        """Each stage's, the run's `energy/joules` and `energy/co2_eq_g`, and the run's `energy/joules_per_<unit>`
        of the units its training processed (when it trained)."""
        metrics = {k: v for s in self.stages for k, v in s.metrics().items()}
        metrics |= {"energy/joules": self.joules, "energy/co2_eq_g": self.co2_grams}
        trained = next((s for s in self.stages if s.stage == "train" and s.units), None)
        if trained is not None:
            metrics[f"energy/joules_per_{trained.unit}"] = self.joules / trained.units
        return metrics

    def tags(self) -> dict[str, str]:
        tags = {k: v for s in self.stages for k, v in s.tags().items()}
        return tags | {"energy.method": self.methods, "energy.grid_g_co2_per_kwh": f"{self.grid_g_co2_per_kwh:g}"}

    def lines(self) -> list[str]:
        """The run in all, then each stage: the summary's lines, the model card's list."""
        label = " (an estimate)" if self.estimated else ""
        total = (
            f"{self.joules:,.1f} J ({self.joules / JOULES_PER_KWH * 1000:.4f} Wh){label}, {self.co2_grams:.3g} g "
            f"CO2-eq at {self.grid_g_co2_per_kwh:g} g/kWh (energy.grid_g_co2_per_kwh)"
        )
        return [total, *(s.line() for s in self.stages)]

    def card_section(self) -> str:
        """The model card's `## Energy`, empty when nothing was measured."""
        if not self.stages:
            return ""
        total, *stages = self.lines()
        return "\n## Energy\n" + "\n".join(f"- {line}" for line in (total, *stages)) + "\n"

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)  # a stage may be the first to write into the run's folder
        path = folder / FILE
        raw = {"grid_g_co2_per_kwh": self.grid_g_co2_per_kwh, "stages": [asdict(s) for s in self.stages]}
        path.write_text(json.dumps(raw, indent=1) + "\n")
        return path

    @classmethod
    def read(cls, folder: Path) -> RunEnergy:
        """What `folder` holds; none measured when it holds no file."""
        path = folder / FILE
        if not path.is_file():
            return cls()
        raw = json.loads(path.read_text())
        stages = tuple(StageEnergy(**{**s, "reading": Reading(**s["reading"])}) for s in raw["stages"])
        return cls(stages, raw["grid_g_co2_per_kwh"])


def write_units(folder: Path, count: int, unit: str) -> Path:
    """What a training's ranks processed together (`count` of `unit`), for its stage's joules per unit."""
    path = folder / UNITS_FILE
    path.write_text(json.dumps({"count": count, "unit": unit}) + "\n")
    return path


def read_units(folder: Path) -> tuple[int, str]:
    """(count, unit) a training left in `folder`; (0, "") when it left none (it failed before the end)."""
    try:
        raw = json.loads((folder / UNITS_FILE).read_text())
    except (OSError, ValueError):
        return 0, ""
    return int(raw["count"]), str(raw["unit"])


def co2_eq_emissions(metrics: Mapping[str, float], tags: Mapping[str, str], training_type: str) -> dict | None:
    """Hugging Face's `co2_eq_emissions` card metadata (grams, and how they were found) from what a run recorded
    (`RunEnergy.metrics` and `tags`); None for a run that recorded no energy."""
    if "energy/co2_eq_g" not in metrics:
        return None
    method = tags.get("energy.method", "")
    how = "estimated from CPU time" if ESTIMATE in method else "measured"
    grid = tags.get("energy.grid_g_co2_per_kwh", "?")
    return {
        "emissions": round(metrics["energy/co2_eq_g"], 6),
        "source": f"Foundry: {metrics['energy/joules']:.1f} J {how} ({method}) x {grid} g CO2-eq/kWh",
        "training_type": training_type,
    }
