"""Stages B-D: build the model from config (B), train it with Lightning on hydrated shards (C), checkpointed (D).

Rank 0 logs to the pipeline's MLflow run, named explicitly. Checkpoints (`foundry/checkpointing/`)
make a resumed run bitwise equal to an uninterrupted one (tested uncompiled in float32: docs/training.md). The
result is a self-contained file (`model.pt`: model args, weights, config, data version) that rebuilds the model
alone; every rank also leaves a digest of its final weights (`weights.rank<N>.sha256`), so replicas can be compared.
What trains is the data's: its `Workload` (`foundry.core.workload`) brings the LightningModule, the loaders,
the warm start and what `model.pt` holds beside the weights; the trainer never asks which workload it is.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch

from foundry.checkpointing.world import Schedule, at_world, saved_schedule
from foundry.config import FoundryConfig, TrainConfig
from foundry.core import run_tags
from foundry.core.energy import write_units
from foundry.core.workload import Workload, for_data
from foundry.runtime.arithmetic import arithmetic, compiles, cpu_threads, resolve_precision, uses_gpu
from foundry.runtime.cpu_features import RESOLVED_PRECISION_TAG
from foundry.training.adapters import lora_spec, save_peft_adapter
from foundry.training.averaging import WeightAverage, averaged_steps
from foundry.training.run import TrainingRun
from foundry.training.sharding import Rank0Buffers, fsdp_strategy, has_batch_norm

log = logging.getLogger(__name__)

NOT_COMPILED = (
    "train.compile is on but no C++ compiler was found (Inductor looks for $CXX, else g++): training uncompiled. "
    "A bf16 step of the default model took 1.3x as long uncompiled on a 2-core AMD EPYC (bench/README.md, "
    "'Compiled, in bfloat16'); install g++ (Debian: apt-get install g++) to compile, or set train.compile=false"
)

# Dense peak FLOP/s of one device (bf16 tensor cores, plain fp32), from the vendors' data sheets.
PEAK_FLOPS = {
    "H200": (989e12, 67e12),
    "H100": (989e12, 67e12),  # SXM
    "H100 PCIe": (756e12, 51e12),
    "A100": (312e12, 19.5e12),
}


def lookup_peak_flops(device_name: str, precision: str) -> float:
    """Peak FLOP/s of a known GPU by name ("NVIDIA H100 PCIe" matches "H100 PCIe"); 0 when unknown."""
    for key in sorted(PEAK_FLOPS, key=len, reverse=True):  # the most specific name first
        if all(part in device_name for part in key.split()):
            bf16, fp32 = PEAK_FLOPS[key]
            return fp32 if precision == "32-true" else bf16
    return 0.0


def peak_flops(t: TrainConfig) -> float:
    """For MFU: `train.peak_flops`, else a known GPU's data-sheet peak, else on CPU a measured matmul rate
    (`foundry.training.cpu_peak`, cached); 0 (no MFU) for an unknown GPU."""
    if t.peak_flops:
        return t.peak_flops
    if uses_gpu(t):
        return lookup_peak_flops(torch.cuda.get_device_name(), resolve_precision(t))
    from foundry.training.cpu_peak import cpu_peak_flops

    return cpu_peak_flops(cpu_threads(t), resolve_precision(t))


def _strategy(t: TrainConfig, units: set[type]):
    """DDP, or FSDP (`foundry.training.sharding`) with `units` (the workload's `fsdp_units`) wrapped one by one."""
    from lightning.pytorch.strategies import DDPStrategy

    timeout = timedelta(seconds=t.collective_timeout_s)  # a dead or stuck rank ends the group, not hangs it
    if t.strategy == "fsdp":
        return fsdp_strategy(timeout, units, uses_gpu(t))
    return DDPStrategy(timeout=timeout) if t.devices * t.num_nodes > 1 else "auto"


def join_process_group(t: TrainConfig) -> None:
    """Join the ranks' process group through the elastic agent's store, under a prefix of the restart count.

    The agent of torch 2.13 keeps one store across restarts, and the process group's keys in it carry no
    attempt: restarted ranks read the addresses of the previous attempt's peers and cannot connect
    (pytorch#167288). Joined here first, the group is one Lightning finds initialised and keeps."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return
    import torch.distributed as dist

    timeout = timedelta(seconds=t.collective_timeout_s)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    attempt = dist.PrefixStore(f"attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    backend = "nccl" if uses_gpu(t) else "gloo"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, store=attempt, rank=rank, world_size=world, timeout=timeout)


@dataclass(frozen=True)
class Progress:
    """How training reports its progress: a bar on the terminal (`bar`), and rank 0's report for the orchestrator
    written to `file` (none when `None`)."""

    bar: bool = True
    file: Path | None = None


def _trainer(
    config: FoundryConfig,
    run_id: str | None,
    io,
    progress: Progress,
    units: set[type],
    callbacks: tuple = (),
    schedule: Schedule | None = None,
    averager: WeightAverage | None = None,
):
    """The Lightning Trainer for `config`, logging to MLflow run `run_id` (none when `None`), checkpointing through
    `io`, with FSDP (when `train.strategy` is fsdp) wrapping the `units` classes one by one; `averager` (a
    `WeightAverage`) takes each step's weights before a checkpoint of that step is written."""
    import lightning as L
    from lightning.pytorch.loggers import MLFlowLogger
    from lightning.pytorch.plugins.environments import LightningEnvironment

    from foundry.checkpointing.writer import CheckpointEvery
    from foundry.training.heartbeats import Heartbeats
    from foundry.training.hosts import RecordHosts
    from foundry.training.progress import ProgressReport
    from foundry.training.stragglers import RankPace

    t = config.train
    loggers = []
    if run_id is not None:
        import mlflow

        loggers.append(MLFlowLogger(tracking_uri=mlflow.get_tracking_uri(), run_id=run_id))
    return L.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        precision=resolve_precision(t),
        deterministic=t.deterministic_kernels(uses_gpu(t)),
        strategy=_strategy(t, units),
        max_steps=t.max_steps,
        accumulate_grad_batches=t.grad_accum_steps,
        gradient_clip_val=t.grad_clip or None,
        val_check_interval=t.val_every_n_steps * t.grad_accum_steps,
        check_val_every_n_epoch=None,
        limit_val_batches=t.val_batches,
        num_sanity_val_steps=0,
        log_every_n_steps=t.log_every_n_steps,
        logger=loggers or False,
        callbacks=[
            *([averager] if averager else []),
            CheckpointEvery(io, config.checkpoint.every_n_steps, arithmetic(t), schedule),
            ProgressReport(progress.file, bar=progress.bar, every_s=min(t.progress_every_s, 5.0)),
            RankPace(t.log_every_n_steps),
            Heartbeats(t.collective_timeout_s),  # a collective that timed out names the rank it waited for
            RecordHosts(run_id),  # every rank: it gathers the ranks' hosts to rank 0
            *callbacks,
        ],
        enable_checkpointing=False,
        enable_progress_bar=False,  # ours counts optimizer steps against max_steps, not batches of an epoch
        enable_model_summary=False,  # its FLOPs column reads 0 for this model; the parameter count is in the card
        default_root_dir=io.directory,
        plugins=[LightningEnvironment(), io],
    )


def train_settings(config: FoundryConfig) -> dict:
    """What every LightningModule takes from `train` (`models.lit_base.SETTINGS`)."""
    t = config.train
    return dict(
        learning_rate=t.learning_rate,
        optimizer="muon" if t.uses_muon else "adamw",
        muon_learning_rate=t.muon_learning_rate,
        weight_decay=t.weight_decay,
        warmup_steps=t.warmup_steps,
        max_steps=t.max_steps,
        min_lr_ratio=t.min_lr_ratio,
        log_every_n_steps=t.log_every_n_steps,
        peak_flops=peak_flops(t),
    )


def build_module(config: FoundryConfig, workload: Workload, data):
    """The LightningModule `workload` trains on `data` (its `data(data_dir)`), compiled when `train.compile` and
    a C++ compiler is found (`compiles`); else uncompiled, with one warning saying so and what it costs."""
    module = workload.module(config, data, train_settings(config), uses_gpu(config.train))
    if compiles(config.train):
        module.model.compile()  # in place: parameter names, and so checkpoints, stay the same
    elif config.train.compile:
        log.warning(NOT_COMPILED)
    return module


def train(
    config: FoundryConfig,
    run: TrainingRun,
    progress: bool = True,
    callbacks: tuple = (),
    progress_file: Path | None = None,
) -> Path:
    """Train `run` to `train.max_steps`, from its `resume_from` (a verified checkpoint) when given. `callbacks` are
    Lightning callbacks added to ours (a search trial's pruning reports and time box). `progress`: a bar on
    the terminal; `progress_file`: where rank 0 reports its progress for the orchestrator."""
    import lightning as L

    from foundry.checkpointing.writer import ManifestCheckpointIO
    from foundry.runtime.logs import quiet_known_warnings, route_library_logs

    route_library_logs()
    quiet_known_warnings()

    data_dir, checkpoint_dir, run_id, resume_from = run.data_dir, run.checkpoint_dir, run.run_id, run.resume_from
    # A checkpoint of another world size goes on with its global batch: the accumulation follows from it.
    config, schedule = at_world(config, saved_schedule(resume_from, config) if resume_from else None)
    workload = for_data(data_dir)
    data = workload.data(data_dir)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cpu_threads(config.train))
    L.seed_everything(config.train.seed, workers=True, verbose=False)
    module = build_module(config, workload, data)
    if config.train.init_from and resume_from is None:  # warm start; a resumed run already holds its progress
        parent = torch.load(config.train.init_from, map_location="cpu", weights_only=True)
        module.model.load_state_dict(workload.warm_start(parent, module, data, config))
    lora = config.finetune.method == "lora"
    share = module.add_adapters(lora_spec(config)) if lora else None  # after the warm start, before a resume
    io = ManifestCheckpointIO(checkpoint_dir, config.checkpoint.keep_last, config.checkpoint.async_save)
    if config.train.strategy == "fsdp" and has_batch_norm(module):  # DDP's handling of BatchNorm, under FSDP
        callbacks = (*callbacks, Rank0Buffers())
    reports = Progress(bar=progress, file=progress_file)
    steps = averaged_steps(config.train, module)
    averager = WeightAverage(steps, config.train.max_steps) if steps else None
    trainer = _trainer(config, run_id, io, reports, workload.fsdp_units(module), callbacks, schedule, averager)
    rank, world = trainer.global_rank, trainer.world_size
    train_loader, val_loader = workload.loaders(config, data_dir, data, rank, world, run.replay)
    try:
        if resume_from is None:  # a resumed loader starts where the checkpoint puts it, inside the fit
            start_loader(train_loader)
        else:
            log.info("resuming from %s", resume_from)
        if run_id is not None and trainer.global_rank == 0:
            started = {
                RESOLVED_PRECISION_TAG: trainer.precision,
                run_tags.COMPILED: str(compiles(config.train)).lower(),
                run_tags.WORLD_SIZES: schedule.tag(),
                run_tags.AVERAGED_STEPS: str(steps),
            }
            _record_start(run_id, resume_from, started, share)
        trainer.fit(module, train_loader, val_loader, ckpt_path=str(resume_from) if resume_from else None)
    finally:
        close_loader(train_loader)
    if trainer.global_rank == 0:  # every rank trains the same shapes: rank 0's count times the world
        write_units(checkpoint_dir, module.units_trained * world, module.throughput_unit.removesuffix("s"))
    if lora:  # the registered model is the base architecture with the adapters merged in; they are kept too
        adapters = module.merge_adapters()
        if trainer.global_rank == 0:
            torch.save(adapters, checkpoint_dir / "adapter.pt")
            save_peft_adapter(module.model.config.to_dict(), adapters, config, checkpoint_dir)
    if averager:  # every rank holds the same mean (DDP); after the last checkpoint, which keeps the optimizer's
        averager.apply(module)
    workload.after_fit(module)  # before the weights are gathered: what the ranks must agree on first
    state = trainer.strategy.lightning_module_state_dict()  # all ranks: a collective under FSDP
    weights = {k.removeprefix("model."): v.detach().cpu() for k, v in state.items()}
    final = checkpoint_dir / "model.pt"
    if weights:  # FSDP gathers the full weights on rank 0 only
        (checkpoint_dir / f"weights.rank{trainer.global_rank}.sha256").write_text(weights_digest(weights) + "\n")
    if trainer.global_rank == 0:
        extra = workload.saved_extra(config, data)
        save_model(final, module.model.config.to_dict(), weights, config, run.data_version, extra)
    return final


def start_loader(loader) -> None:
    """A loader that decodes in worker processes starts them now, to decode while the run is recorded and the trainer
    sets up (`foundry.vision.training.ShardBatches.start_workers`); the others start at their first batch."""
    start = getattr(loader, "start_workers", None)
    if start is not None:
        start()


def close_loader(loader) -> None:
    """A loader that decodes in worker processes (`foundry.vision.training.ShardBatches`) ends them with the fit;
    the others have nothing to end."""
    close = getattr(loader, "close", None)
    if close is not None:
        close()


def _record_start(
    run_id: str, resume_from: Path | None, settings: dict[str, str], share: tuple[int, int] | None
) -> None:
    """Where this attempt started, the `settings` it resolved to here (precision, whether it compiled, the world sizes
    of the training so far: run tags), and with adapters, the parameters it trains."""
    from mlflow import MlflowClient

    from foundry.checkpointing.manifest import read_manifest

    client = MlflowClient()
    entries = [] if resume_from is None else read_manifest(resume_from.parent)
    step = 0 if resume_from is None else next(e.step for e in entries if e.file == resume_from.name)
    client.set_tag(run_id, run_tags.RESUMED_FROM_STEP, str(step))
    for key, value in settings.items():
        client.set_tag(run_id, key, value)
    if share is not None:
        client.log_metric(run_id, "finetune/trainable_params", share[0])
        client.log_metric(run_id, "finetune/trainable_share", share[0] / share[1])


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes: equal digests, bitwise-equal weights."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        # reshape: a 0-d tensor (BatchNorm's batch count) has no byte view; the others' bytes are unchanged
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def save_model(
    path: Path, model_args: dict, state_dict: dict, config: FoundryConfig, data_version: str, extra: dict | None = None
) -> None:
    """Everything needed to rebuild the model, and nothing that needs this code base's paths; `extra` adds
    what the model's use needs (the workload's `saved_extra`: a chat template, an image model's labels)."""
    from foundry.checkpointing.manifest import write_atomic

    payload = {
        "model_args": model_args,
        "state_dict": state_dict,
        "config": config.model_dump(mode="json"),
        "data_version": data_version,
        **(extra or {}),
    }
    write_atomic(path, lambda f: torch.save(payload, f))
