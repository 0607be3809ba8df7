"""`foundry plan`'s energy of a training before it runs: its time from its FLOPs, times a power figure.

    FLOPs    nanoGPT's 6N + 12 L C T per token (`models.gpt.GPT.flops_per_token`, counted from the config's shapes),
             times max_steps x batch_size x grad_accum_steps x devices x block_size tokens (the batch ramp's
             smaller first steps counted full: an upper bound)
    time     FLOPs / (peak FLOP/s x `energy.plan_utilisation` x devices); the peak is `train.peak_flops`, else a
             known GPU's data sheet, else this CPU's measured matmul rate (`foundry.training.cpu_peak`)
    power    a CPU: `energy.watts_per_core` x the rank's threads x ranks; a GPU: its data sheet's board power x
             devices (the host's CPU not added)

An estimate of what the run's meter reads afterwards (`foundry.energy.meter`), to compare with it; text models only,
as `foundry plan`'s memory is.
"""

from __future__ import annotations

from dataclasses import dataclass

from foundry.config import FoundryConfig
from foundry.training.plan import n_params

# Board power of one device in watts, from the vendors' data sheets (SXM unless named), matched as the peaks are.
BOARD_WATTS = {"H200": 700.0, "H100": 700.0, "H100 PCIe": 350.0, "A100": 400.0}


@dataclass(frozen=True)
class EnergyPlan:
    """`flops` of the whole training at `flops_per_s` (all devices, achieved) drawing `watts` (`power`: whence)."""

    flops: float
    flops_per_s: float
    watts: float
    power: str

    @property
    def seconds(self) -> float:
        return self.flops / self.flops_per_s

    @property
    def joules(self) -> float:
        return self.seconds * self.watts


def flops_per_token(config: FoundryConfig) -> float:
    m = config.model
    ahead = 6 * m.mtp_depth * config.tokenizer.vocab_size * m.n_embd
    return 6 * n_params(m, config.tokenizer.vocab_size) + 12 * m.n_layer * m.n_embd * m.block_size + ahead


def training_tokens(config: FoundryConfig) -> int:
    t = config.train
    return t.max_steps * t.batch_size * t.grad_accum_steps * t.devices * t.num_nodes * config.model.block_size


def board_watts(device_name: str) -> float:
    """A known GPU's board power by name, the most specific name first; 0 when unknown."""
    for key in sorted(BOARD_WATTS, key=len, reverse=True):
        if all(part in device_name for part in key.split()):
            return BOARD_WATTS[key]
    return 0.0


def plan(config: FoundryConfig, peak_flops: float, on_gpu: bool, device_name: str = "") -> EnergyPlan | None:
    """The plan for `config` at `peak_flops` per device; None when a GPU's power is not known by its name."""
    t, e = config.train, config.energy
    world = t.devices * t.num_nodes
    if on_gpu:
        watts = board_watts(device_name)
        if not watts or not peak_flops:
            return None
        total, power = watts * world, f"{world} x {watts:g} W ({device_name}'s data sheet)"
    else:
        from foundry.runtime.arithmetic import cpu_threads

        cores = cpu_threads(t) * world
        total, power = e.watts_per_core * cores, f"{cores} cores x {e.watts_per_core:g} W (energy.watts_per_core)"
    flops = flops_per_token(config) * training_tokens(config)
    return EnergyPlan(flops, peak_flops * e.plan_utilisation * world, total, power)


def planned(config: FoundryConfig) -> EnergyPlan | None:
    """`plan` on this machine: the peak `foundry.training.trainer.peak_flops` gives (measured once on a CPU)."""
    from foundry.runtime.arithmetic import uses_gpu
    from foundry.training.trainer import peak_flops

    on_gpu = uses_gpu(config.train)
    name = ""
    if on_gpu:
        import torch

        name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return plan(config, peak_flops(config.train) if (not on_gpu or name) else 0.0, on_gpu, name)


def format_energy(config: FoundryConfig, energy: EnergyPlan | None) -> str:
    if energy is None:
        return (
            "energy       unknown: no GPU here that Foundry knows the peak and power of (plan on the GPU itself, "
            "or set train.peak_flops)"
        )
    grams = energy.joules / 3.6e6 * config.energy.grid_g_co2_per_kwh
    return (
        f"time         ~{energy.seconds:,.0f} s: {energy.flops:.3g} FLOPs at {energy.flops_per_s:.3g} FLOP/s "
        f"({config.energy.plan_utilisation:.0%} of the peak, energy.plan_utilisation)\n"
        f"energy       ~{energy.joules:,.0f} J ({energy.joules / 3600:,.2f} Wh) at {energy.watts:,.0f} W: {energy.power}; "
        f"~{grams:.3g} g CO2-eq at {config.energy.grid_g_co2_per_kwh:g} g/kWh"
    )
