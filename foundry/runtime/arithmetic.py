"""What decides a training step's floating-point results on this machine besides the config's values and the data:
threads, precision, device, world size, torch's version, whether it compiles. The resume key holds what of it does not follow from the world
size (`key_arithmetic`, `foundry.checkpointing.resume`), so a run at the same world size resumes only checkpoints it can
continue bit for bit, and one at another world size still finds them; the trainer sets the process up by it."""

from __future__ import annotations

import os

from foundry.config import TrainConfig
from foundry.runtime.cpu_features import cpu_has_bf16


def _torch():
    import torch  # only when asked: the resume key is computed where nothing else needs torch yet

    return torch


def uses_gpu(t: TrainConfig) -> bool:
    return t.accelerator == "gpu" or (t.accelerator == "auto" and _torch().cuda.is_available())


def resolve_precision(t: TrainConfig) -> str:
    return t.resolved_precision(uses_gpu(t), cpu_has_bf16())


def has_cxx_compiler() -> bool:
    """Whether Inductor finds a C++ compiler it can run, by its own search (`$CXX`, else g++): without one,
    `torch.compile` fails at the first step (`InvalidCxxCompiler`), on a CPU and for Triton's launcher on a GPU."""
    from torch._inductor import config as inductor
    from torch._inductor.cpp_builder import cpp_compiler_search
    from torch._inductor.exc import InvalidCxxCompiler

    search = inductor.cpp.cxx if isinstance(inductor.cpp.cxx, (list, tuple)) else (inductor.cpp.cxx,)
    try:
        cpp_compiler_search(tuple(search))
    except InvalidCxxCompiler:
        return False
    return True


def compiles(t: TrainConfig) -> bool:
    """`train.compile` on this machine: off where no C++ compiler is found (the run trains uncompiled, saying so)."""
    return t.compile and has_cxx_compiler()


def cores() -> int:
    """The CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_threads(t: TrainConfig) -> int:
    """Threads for one rank, decided here rather than inherited: float sums depend on the thread
    count, and a process's environment may say otherwise (Dask's nanny leaves OMP_NUM_THREADS=1 in
    its parent, which every training process started from there would inherit)."""
    return t.cpu_threads or max(1, cores() // t.devices)


def device_kind(t: TrainConfig) -> str:
    """What runs the arithmetic: "cpu", or the GPU's model with the CUDA and cuDNN versions (kernels differ
    from one GPU model, and one library version, to another)."""
    if not uses_gpu(t):
        return "cpu"
    if not _torch().cuda.is_available():
        return "cuda"
    return f"cuda:{_torch().cuda.get_device_name()} (CUDA {_torch().version.cuda}, cuDNN {_torch().backends.cudnn.version()})"


def arithmetic(t: TrainConfig) -> dict[str, str | int | bool]:
    """What decides the floating-point results of a step besides the config's training values and the
    data: runs that differ in any of these do not compute the same bits (on a GPU, agreeing on them is
    necessary but not sufficient: see `train.deterministic`)."""
    return {
        "threads": cpu_threads(t),
        "precision": resolve_precision(t),
        "device": device_kind(t),
        "world_size": t.devices * t.num_nodes,
        "torch": str(_torch().__version__),  # a plain str: TorchVersion does not load with weights_only
        "deterministic": t.deterministic,
        "compile": compiles(t),  # Inductor's kernels round differently from eager's
    }


# What `arithmetic` holds that follows from the world size: it differs between the attempts of a training resumed at
# another world size (`foundry.checkpointing.world`), and only then.
WORLD_DERIVED = ("world_size", "threads")


def key_arithmetic(t: TrainConfig) -> dict[str, str | int | bool]:
    """`arithmetic` without the world size, for the resume key. `cpu_threads: 0` is held as the cores its ranks share
    (not what each rank takes of them): runs of this machine at any world size find one folder, and runs at one
    world size in that folder run the same threads."""
    held = {k: v for k, v in arithmetic(t).items() if k not in WORLD_DERIVED}
    return {**held, "threads": t.cpu_threads or f"the ranks' share of {cores()} cores"}
