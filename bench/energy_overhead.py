"""What measuring a stage's energy costs a training step (#59 point 4): the same steps with no meter, inside an
`EnergyMeter` as this machine has it, and inside one reading a RAPL tree sampled 100 times as often as the default.

    python bench/energy_overhead.py [--blocks 6] [--steps 10] [--set train.batch_size=16 ...]

Each side trains `--steps` steps of the default config's GPT (`bench/train_overhead.py`'s raw loop: the optimizer
training builds for it, batches of the same shape drawn in turn from one stream, eager float32 unless `--set` says
otherwise) per block; after one untimed round of every side, the sides take turns block by block (ABC, then CBA, so
`--blocks` is even), in one process, so load from other work hits them alike:
- *none*: no meter;
- *meter*: `foundry.energy.meter.EnergyMeter` around the block, as `foundry.energy.tracked.metered` puts it around a
  stage, reading RAPL where the kernel exposes it, else CPU time at the start and the end (the estimate);
- *sampled*: the meter pointed at a powercap tree of two packages built in a temp folder (the kernel's layout, as
  tests/fast/energy builds it), its sampler thread reading the counters every 0.05 s (`energy.sample_every_s`: 5 s).
The last line is the headline: each metered side's median time a step over the unmetered side's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from foundry.runtime.env import configure_environment  # noqa: E402

configure_environment()  # before the libraries load

if TYPE_CHECKING:
    from train_overhead import RawLoop

    from foundry.energy.meter import EnergyMeter

SAMPLE_EVERY_S = 0.05  # 100x as often as the default `energy.sample_every_s`


def powercap_tree(root: Path) -> Path:
    """Two RAPL packages as the kernel lays them out: `name`, `energy_uj`, `max_energy_range_uj` each."""
    for package in ("intel-rapl:0", "intel-rapl:1"):
        zone = root / package
        zone.mkdir(parents=True)
        (zone / "name").write_text(package.replace("intel-rapl:", "package-") + "\n")
        (zone / "energy_uj").write_text("1000000\n")
        (zone / "max_energy_range_uj").write_text("262143328850\n")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=6, help="timed blocks of each side")
    parser.add_argument("--steps", type=int, default=10, help="steps a block")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.blocks % 2:
        parser.error("--blocks must be even: the sides' order is reversed every other block")

    import torch
    from train_overhead import RawLoop, synthetic_tokens

    from foundry.config import load_config
    from foundry.energy.meter import EnergyMeter

    total = args.warmup + 3 * (args.blocks + 1) * args.steps
    config = load_config(
        None, [f"train.max_steps={total}", "train.precision=32-true", "train.compile=false", *args.overrides]
    )
    raw = RawLoop(config, synthetic_tokens(config.tokenizer.vocab_size))
    raw.run(args.warmup)
    watts = config.energy.watts_per_core
    with tempfile.TemporaryDirectory() as folder:
        tree = powercap_tree(Path(folder) / "powercap")
        sides = {
            "none": lambda: raw.run(args.steps),
            "meter": lambda: metered(EnergyMeter(watts), raw, args.steps),
            "sampled": lambda: metered(
                EnergyMeter(watts, powercap=tree, sample_every_s=SAMPLE_EVERY_S), raw, args.steps, method="rapl"
            ),
        }
        for side in sides.values():  # untimed: the first block of each pays for what warming the loop left
            side()
        times: dict[str, list[float]] = {name: [] for name in sides}
        print(
            f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, torch threads {torch.get_num_threads()}; "
            f"{args.blocks} blocks of {args.steps} steps a side, {config.train.batch_size} x {config.model.block_size} "
            f"tokens a step"
        )
        for block in range(args.blocks):
            for name in list(sides) if block % 2 == 0 else reversed(list(sides)):
                times[name].append(sides[name]())
    median = {name: statistics.median(seconds) for name, seconds in times.items()}
    for name, seconds in times.items():
        print(f"{name}: {1000 * median[name]:.1f} ms a step (blocks {', '.join(f'{1000 * s:.1f}' for s in seconds)})")
    print(
        f"energy_overhead: meter {median['meter'] / median['none']:.3f}x, sampled every {SAMPLE_EVERY_S} s "
        f"{median['sampled'] / median['none']:.3f}x the unmetered step"
    )


def metered(meter: EnergyMeter, raw: RawLoop, steps: int, method: str | None = None) -> float:
    """Seconds a step of `raw`'s `steps`, the meter entered before the first and left after the last; `method`: the
    one its reading must name (the sampled side's tree read as RAPL, not fallen back to the estimate)."""
    start = time.perf_counter()
    with meter:
        raw.run(steps)
    if method is not None and meter.reading.method != method:
        raise SystemExit(f"the meter read {meter.reading.method}, not {method}")
    return (time.perf_counter() - start) / steps


if __name__ == "__main__":
    main()
