"""`EnergyMeter`: the joules a block of code used, from the counters the machine exposes, else estimated.

Sources, each added when present:

    nvml      each visible GPU's total-energy counter (millijoules since the driver loaded), through pynvml
              (the nvidia-ml-py package; torch.cuda's own power API needs it too, so without it no GPU is read)
    rapl      each CPU package's `energy_uj` under `/sys/class/powercap/intel-rapl:N/` (AMD's CPUs use the same
              names); the counter wraps at `max_energy_range_uj`, a few thousand joules, so it is sampled every
              `sample_every_s` and each wrap added back. Sub-zones (`intel-rapl:N:M`) are inside their package and
              not added again. Often readable by root only: unreadable is absent.
    estimate  where no CPU counter is readable: the CPU seconds of this process and of the children it waited for
              (`getrusage`: a training's ranks, once they exit) times `watts_per_core`. A figure of the CPU's
              work, not a measurement of the machine: its method says `estimate:cpu_time`, and the reading keeps
              its inputs.

The sum is the reading's `joules`; `method` names what it adds (`nvml+rapl`, `nvml+estimate:cpu_time`...).
Nothing here reaches the network or imports Prefect or MLflow. The reading's type is the core's
(`foundry.core.energy`): the stages' results carry it.
"""

from __future__ import annotations

import importlib
import resource
import threading
import time
from pathlib import Path

from foundry.core.energy import ESTIMATE, Reading

POWERCAP = Path("/sys/class/powercap")


class Rapl:
    """The CPU packages' RAPL counters under `root` (a powercap folder), read and unwrapped sample by sample."""

    def __init__(self, root: Path = POWERCAP):
        self.zones = [z for z in sorted(root.glob("intel-rapl:*")) if z.name.count(":") == 1 and _readable(z)]
        self._last = {z: _counter(z) for z in self.zones}
        self.micro_joules = 0

    def sample(self) -> None:
        """Adds what each package used since the last sample, one wrap of its counter allowed."""
        for zone in self.zones:
            now = _counter(zone)
            before, self._last[zone] = self._last[zone], now
            self.micro_joules += now - before if now >= before else now + _wrap(zone) - before


def _counter(zone: Path) -> int:
    return int((zone / "energy_uj").read_text())


def _wrap(zone: Path) -> int:
    return int((zone / "max_energy_range_uj").read_text())


def _readable(zone: Path) -> bool:
    try:
        _counter(zone), _wrap(zone)
    except (OSError, ValueError):  # absent, or root's only (the kernel's default since 2020)
        return False
    return True


class Nvml:
    """Each visible GPU's total-energy counter through pynvml, when it is installed and finds a driver."""

    def __init__(self):
        self.handles: list = []
        try:  # optional: not a dependency (no GPU, no driver); import_module keeps it out of the declared imports
            self._nvml = importlib.import_module("pynvml")
            self._nvml.nvmlInit()
            count = self._nvml.nvmlDeviceGetCount()
            self.handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._start = self._total()
        except Exception:  # noqa: BLE001 - ImportError, or pynvml's NVMLError (no driver, no counter on this GPU)
            self.handles = []

    def _total(self) -> int:
        return sum(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles)

    def joules(self) -> float:
        return (self._total() - self._start) / 1000 if self.handles else 0.0


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and of the children it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class EnergyMeter:
    """`with EnergyMeter(watts_per_core) as meter: ...`, then `meter.reading`. `powercap`: the folder RAPL's
    zones are read from (tests point it at a folder of their own); `sample_every_s`: how often RAPL's counters
    are read while the block runs, so that no wrap goes unseen (0: at the start and the end only)."""

    def __init__(self, watts_per_core: float, powercap: Path = POWERCAP, sample_every_s: float = 5.0):
        self.watts_per_core, self.powercap, self.sample_every_s = watts_per_core, powercap, sample_every_s
        self.reading: Reading | None = None
        self._stop = threading.Event()

    def __enter__(self) -> EnergyMeter:
        self._rapl, self._nvml = Rapl(self.powercap), Nvml()
        self._cpu, self._wall = cpu_seconds(), time.perf_counter()
        self._sampler = None
        if self._rapl.zones and self.sample_every_s > 0:
            self._sampler = threading.Thread(target=self._sample, name="rapl-sampler", daemon=True)
            self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.sample_every_s):
            self._rapl.sample()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()
        self._rapl.sample()
        self.reading = self._read(cpu_seconds() - self._cpu, time.perf_counter() - self._wall)

    def _read(self, cpu: float, seconds: float) -> Reading:
        gpu = self._nvml.joules()
        methods = ["nvml"] if self._nvml.handles else []
        if self._rapl.zones:
            methods.append("rapl")
            return Reading(
                gpu + self._rapl.micro_joules / 1e6,
                seconds,
                "+".join(methods),
                cpu_joules=self._rapl.micro_joules / 1e6,
                gpu_joules=gpu,
            )
        estimate = estimated_joules(cpu, self.watts_per_core)
        methods.append(ESTIMATE)
        return Reading(
            gpu + estimate,
            seconds,
            "+".join(methods),
            estimate,
            gpu,
            cpu_seconds=cpu,
            watts_per_core=self.watts_per_core,
        )


def estimated_joules(cpu_seconds: float, watts_per_core: float) -> float:
    """A core busy for one second at `watts_per_core` watts uses that many joules."""
    return cpu_seconds * watts_per_core
