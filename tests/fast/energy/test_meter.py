"""foundry.energy.meter: RAPL's counters read from a powercap tree built in tmp_path (the kernel's file layout, the
meter pointed at its root), their wraps; the estimate from CPU time, this process's and its children's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundry.core.energy import ESTIMATE
from foundry.energy.meter import EnergyMeter, Rapl, estimated_joules

WRAP = 262_143_328_850  # a package's max_energy_range_uj as one kernel reports it


def zone(root: Path, name: str, energy_uj: int, wrap: int = WRAP) -> Path:
    """One powercap zone as the kernel lays it out: a folder with `name`, `energy_uj`, `max_energy_range_uj`."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "name").write_text(name.replace("intel-rapl:", "package-") + "\n")
    set_counter(folder, energy_uj)
    (folder / "max_energy_range_uj").write_text(f"{wrap}\n")
    return folder


def set_counter(folder: Path, energy_uj: int) -> None:
    """Whole, as the kernel's file reads: the sampler thread may read it any time."""
    (folder / "energy_uj.new").write_text(f"{energy_uj}\n")
    os.replace(folder / "energy_uj.new", folder / "energy_uj")


def burn(seconds: float) -> None:
    deadline = time.process_time() + seconds
    while time.process_time() < deadline:
        pass


def test_rapl_adds_each_package_and_not_its_sub_zones(tmp_path):
    zero, one = zone(tmp_path, "intel-rapl:0", 1_000_000), zone(tmp_path, "intel-rapl:1", 5_000_000)
    core = zone(tmp_path, "intel-rapl:0:0", 0)  # inside package 0: its energy is already package 0's
    with EnergyMeter(watts_per_core=10, powercap=tmp_path, sample_every_s=0) as meter:
        set_counter(zero, 3_500_000)  # 2.5 J
        set_counter(one, 6_000_000)  # 1 J
        set_counter(core, 9_000_000)
    reading = meter.reading
    assert reading.method == "rapl" and not reading.estimated
    assert reading.joules == pytest.approx(3.5) and reading.cpu_joules == pytest.approx(3.5)
    assert reading.cpu_seconds == 0 and reading.watts_per_core == 0  # measured: no estimate's inputs


def test_rapl_adds_a_wrapped_counter_back(tmp_path):
    package = zone(tmp_path, "intel-rapl:0", 1_000, wrap=10_000_000)
    with EnergyMeter(watts_per_core=10, powercap=tmp_path, sample_every_s=0) as meter:
        set_counter(package, 500)  # through max_energy_range_uj and on: 10 J - 1000 uJ + 500 uJ
    assert meter.reading.joules == pytest.approx((10_000_000 - 1_000 + 500) / 1e6)


def test_sampling_sees_each_of_several_wraps(tmp_path):
    package = zone(tmp_path, "intel-rapl:0", 0, wrap=1_000_000)
    rapl = Rapl(tmp_path)
    for value in (900_000, 100_000, 800_000, 200_000):  # two wraps: 0.9 + 0.2 + 0.7 + 0.4 J
        set_counter(package, value)
        rapl.sample()
    assert rapl.micro_joules == 2_200_000


def test_the_sampler_thread_reads_while_the_block_runs(tmp_path):
    package = zone(tmp_path, "intel-rapl:0", 0, wrap=1_000_000)
    with EnergyMeter(watts_per_core=10, powercap=tmp_path, sample_every_s=0.05) as meter:
        set_counter(package, 900_000)
        time.sleep(0.5)  # several samples: the next value reads as one wrap, not as going back
        set_counter(package, 100_000)
    assert meter.reading.joules == pytest.approx(1.1)


def test_an_unreadable_counter_falls_back_to_the_estimate(tmp_path):
    package = zone(tmp_path, "intel-rapl:0", 0)
    (package / "energy_uj").write_text("")  # what a reader without the permission gets is no number either
    with EnergyMeter(watts_per_core=7, powercap=tmp_path, sample_every_s=0) as meter:
        burn(0.05)
    assert meter.reading.method == ESTIMATE


def test_estimate_arithmetic():
    assert estimated_joules(12.5, 4.0) == 50.0
    assert estimated_joules(0.0, 4.0) == 0.0


def test_the_estimate_is_cpu_seconds_times_watts_per_core_and_keeps_its_inputs(tmp_path):
    with EnergyMeter(watts_per_core=12, powercap=tmp_path / "absent", sample_every_s=0) as meter:
        burn(0.3)
    reading = meter.reading
    assert reading.method == ESTIMATE and reading.estimated
    assert 0.25 <= reading.cpu_seconds < 5
    assert reading.watts_per_core == 12
    assert reading.joules == pytest.approx(reading.cpu_seconds * 12) == pytest.approx(reading.cpu_joules)
    assert reading.seconds >= 0.25


def test_the_estimate_counts_the_children_it_waited_for(tmp_path):
    """A training's ranks are child processes: their CPU time is the stage's too."""
    child = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    with EnergyMeter(watts_per_core=10, powercap=tmp_path, sample_every_s=0) as meter:
        subprocess.run([sys.executable, "-c", child], check=True)
    assert meter.reading.cpu_seconds >= 0.55


def test_this_machine_has_no_readable_rapl_or_a_reading_says_which():
    """Here, RAPL is absent (no /sys/class/powercap) and pynvml not installed: the estimate; elsewhere the method
    names the counters it read."""
    with EnergyMeter(watts_per_core=10, sample_every_s=0) as meter:
        burn(0.02)
    assert meter.reading.method in {ESTIMATE, "rapl", "nvml+rapl", f"nvml+{ESTIMATE}"}
    assert meter.reading.joules > 0
