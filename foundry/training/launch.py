"""Starting the training processes: in this process for one rank, else under PyTorch's elastic agent.

Several ranks run `python -m foundry.training.worker` under `torch.distributed.launcher.api.elastic_launch`,
the library behind torchrun, with one local agent for all of them: the cluster templates in infra/ run the
same entry point with torchrun, so the local launch exercises the same code path. The agent starts and
stops the ranks and keeps each rank's output in `<checkpoints>/rank-logs/`, whose new lines reach this
process's logging (a Prefect task run's logs) while the ranks run; a rank that raises writes its
traceback to its error file, and `TrainingFailed` carries it; with `train.max_restarts` it restarts every
rank after a failure, each resuming from the newest intact checkpoint. What the library lacks stays here:
naming the rank that failed first, the replica check, and the resume point. SIGTERM to this process (a
preemption) reaches the ranks through the agent, which gives them `train.preempt_grace_s` to stop at a step with a
checkpoint (`foundry.runtime.preemption`); `Preempted` then names it. With `train.launcher: slurm`, `launch_with`
sends the ranks to a SLURM cluster instead (`foundry.training.slurm`), into the same folder.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from foundry.config import FoundryConfig
from foundry.core.contracts import DataVersion, Replay
from foundry.runtime import preemption
from foundry.training.failures import TrainingFailed, describe

if TYPE_CHECKING:  # torch loads when a launch needs it, not when this module is imported
    from torch.distributed.launcher.api import LaunchConfig

__all__ = ["TrainingFailed", "check_replicas", "launch", "launch_local", "launch_with", "worker_args", "world_size"]

TRAIN_ENTRY = "foundry.training.worker"
# The signals the agent takes over in the main thread (its default TORCHELASTIC_SIGNALS_TO_HANDLE).
AGENT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
# Seconds between SIGTERM and SIGKILL when the agent stops the ranks after one failed (torch: 30 s); when it stops
# them because it was sent SIGTERM, they get `train.preempt_grace_s` to write their checkpoint.
SHUTDOWN_GRACE_S = 5


def world_size(config: FoundryConfig) -> int:
    return config.train.num_nodes * config.train.devices


def worker_args(
    config: FoundryConfig,
    data_dir: Path,
    checkpoint_dir: Path,
    run_id: str | None,
    data_version: str,
    resume_from: Path | None,
    replay: Replay | None = None,
) -> list[str]:
    """`-m foundry.training.worker ...`, the arguments of every rank; the config travels as a JSON file, and
    beside it what the run replays (`replay.json`, a `Replay`: found by the flow, not set by the user)."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    config_path = checkpoint_dir / "train_config.json"
    config_path.write_text(config.model_dump_json())
    args = ["-m", TRAIN_ENTRY, "--config", str(config_path), "--data", str(data_dir)]
    args += ["--checkpoints", str(checkpoint_dir), "--data-version", data_version]
    args += ["--run-id", run_id] if run_id else []
    args += ["--replay", str(replay.write(checkpoint_dir / "replay.json"))] if replay else []
    if config.train.max_restarts:
        # The agent restarts ranks with these same arguments: each start takes the newest intact checkpoint.
        # Every rank looks before the process group forms, and nothing is saved until it has, so all agree.
        return args + ["--resume-from", "auto"]
    return args + ["--resume-from", str(resume_from) if resume_from else "none"]


def launch_config(config: FoundryConfig, log_dir: Path, tee: bool = True) -> LaunchConfig:
    """One agent, all ranks on this machine, as `torchrun --standalone` sets it up; `tee`: the ranks' output
    on this process's stdout and stderr as well as in their files."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=world_size(config),
        # A rendezvous store of its own on a port the OS picks: no race for a free port.
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        run_id=f"foundry-{uuid.uuid4().hex[:8]}",
        role="train",
        local_addr="127.0.0.1",  # no look-up of this host's name: loopback only
        max_restarts=config.train.max_restarts,
        # A failure is noticed within 0.1 s; the agent then sends the other ranks SIGTERM, and SIGKILL
        # SHUTDOWN_GRACE_S later (`_grace_kept`): a rank stuck where SIGTERM cannot reach it costs that long.
        # Preempted (SIGTERM to the agent), the ranks get the preemption's grace to checkpoint and exit.
        monitor_interval=0.1,
        shutdown_timeout=math.ceil(config.train.preempt_grace_s),
        logs_specs=DefaultLogsSpecs(log_dir=str(log_dir), redirects=Std.ALL, tee=Std.ALL if tee else Std.NONE),
        log_line_prefix_template="[rank${rank}]: ",
    )


@contextmanager
def _signals_kept() -> Iterator[None]:
    """The agent installs its own handlers for AGENT_SIGNALS and never puts them back; afterwards Ctrl-C in
    this process (a Prefect worker, pytest) would raise its SignalException instead of KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():  # the agent leaves signals alone there
        yield
        return
    handlers = {s: signal.getsignal(s) for s in AGENT_SIGNALS}
    variable = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE")  # the agent sets it in this process too
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            if handler is not None:  # None: installed outside Python, cannot be restored from here
                signal.signal(sig, handler)
        if variable is None:
            os.environ.pop("TORCHELASTIC_SIGNALS_TO_HANDLE", None)
        else:
            os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = variable


@contextmanager
def _grace_kept() -> Iterator[None]:
    """torch's agent stops a failed group with its own fixed 30 s between SIGTERM and SIGKILL, whatever
    `shutdown_timeout` says (that one, the preemption's grace, it keeps for its final shutdown, a SIGTERM's too);
    here a failed group gets SHUTDOWN_GRACE_S. A rank killed early loses nothing saved: checkpoints are written
    whole, then renamed."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    saved = LocalElasticAgent._stop_workers
    LocalElasticAgent._stop_workers = lambda self, worker_group, *args: self._shutdown(timeout=SHUTDOWN_GRACE_S)
    try:
        yield
    finally:
        LocalElasticAgent._stop_workers = saved


@contextmanager
def _no_name_lookups() -> Iterator[None]:
    """The agent names its host in the event records it builds and in a failure's message with
    `socket.getfqdn()`, a DNS query wherever /etc/hosts does not know the name: on an air-gapped node, a
    query beyond loopback. Locally this host is 127.0.0.1 to the agent anyway (`local_addr`), so for the
    launch the records get the plain host name, which needs no lookup."""
    from types import SimpleNamespace

    from torch.distributed.elastic.agent.server import api
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import errors

    saved = api._get_fq_hostname, LocalElasticAgent._get_fq_hostname, errors.socket
    api._get_fq_hostname = socket.gethostname
    LocalElasticAgent._get_fq_hostname = lambda self: socket.gethostname()
    errors.socket = SimpleNamespace(getfqdn=socket.gethostname)
    try:
        yield
    finally:
        api._get_fq_hostname, LocalElasticAgent._get_fq_hostname, errors.socket = saved


@contextmanager
def _sigterm_starts_the_grace() -> Iterator[None]:
    """The agent's handler raises its SignalException, on which it stops the ranks; first, here, it starts the
    preemption's grace period, at whose end whatever still runs is ended (`preemption.hard_exit`)."""
    from torch.distributed.elastic.multiprocessing import api

    saved = api._terminate_process_handler

    def handler(signum: int, frame) -> None:
        if signum == signal.SIGTERM and preemption.armed():  # elsewhere (a deployment's run) as before
            preemption.request()
        saved(signum, frame)

    api._terminate_process_handler = handler
    try:
        yield
    finally:
        api._terminate_process_handler = saved


def run_ranks(config: FoundryConfig, args: list[str], log_dir: Path) -> None:
    """`python <args>` as every rank; waits for all, and raises TrainingFailed naming the rank that failed first,
    or Preempted naming the newest checkpoint when SIGTERM stopped them (the ranks' exit status says so).
    Where logging is set up (a Prefect run, the CLI), the ranks' lines go through it while they run
    (`foundry.training.rank_logs`); elsewhere the agent copies them onto this process's output."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from foundry.runtime.logs import route_library_logs
    from foundry.training.rank_logs import forwarded

    route_library_logs()  # our INFO lines through the handlers, as the in-process path has them
    logged = bool(logging.getLogger().handlers)
    spec = launch_config(config, log_dir, tee=not logged)
    try:
        with (
            _signals_kept(),
            _no_name_lookups(),
            _grace_kept(),
            _sigterm_starts_the_grace(),
            forwarded(log_dir, spec.run_id) if logged else nullcontext(),
        ):
            elastic_launch(spec, sys.executable)(*args)
    except SignalException as exc:
        if exc.sigval != signal.SIGTERM or not preemption.armed():
            raise
        raise preemption.stopped() from exc
    except ChildFailedError as exc:
        if all(f.exitcode == preemption.EXIT_CODE for f in exc.failures.values()):  # each rank stopped on SIGTERM
            raise preemption.stopped() from exc
        raise TrainingFailed(describe(exc.failures, world_size(config), log_dir)) from exc


def check_replicas(checkpoint_dir: Path, n_ranks: int) -> None:
    """Data parallel replicas must end bitwise equal; a difference is a bug, not noise."""
    digests = {rank: (checkpoint_dir / f"weights.rank{rank}.sha256") for rank in range(n_ranks)}
    found = {rank: path.read_text().strip() for rank, path in digests.items() if path.is_file()}
    if len(set(found.values())) > 1:
        raise TrainingFailed(f"ranks ended with different weights: {found}")


def launch_local(
    config: FoundryConfig,
    data_dir: Path,
    checkpoint_dir: Path,
    run_id: str | None,
    data_version: str,
    resume_from: Path | None = None,
    replay: Replay | None = None,
) -> Path:
    """Run all ranks on this machine and wait; if one fails, the agent stops the rest and we say which."""
    for stale in checkpoint_dir.glob("weights.rank*.sha256"):  # a digest left by an earlier try proves nothing
        stale.unlink()
    args = worker_args(config, data_dir, checkpoint_dir, run_id, data_version, resume_from, replay)
    run_ranks(config, args, checkpoint_dir / "rank-logs")
    check_replicas(checkpoint_dir, world_size(config))
    return checkpoint_dir / "model.pt"


def launch(
    config: FoundryConfig,
    data_dir: Path,
    checkpoint_dir: Path,
    run_id: str | None,
    data_version: str,
    replay: Replay | None = None,
) -> Path:
    """Train into `checkpoint_dir`, resuming from its newest intact checkpoint if a previous try left one;
    `replay`: the pretraining data an SFT or DPO run replays windows of (its config's replay fraction)."""
    from foundry.checkpointing.resume import resume_point
    from foundry.training.progress import PROGRESS_FILE
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import peak_flops, train

    resume_from = resume_point(checkpoint_dir)
    peak_flops(config.train)  # a CPU's peak is measured once, here, not by every rank at the same time
    with preemption.training(checkpoint_dir):  # SIGTERM: a checkpoint first, named
        if world_size(config) == 1:  # no processes to start: the fast path, in this process
            bar = sys.stderr.isatty()  # on a terminal; elsewhere (CI, logs) the task's periodic lines report progress
            report = checkpoint_dir / PROGRESS_FILE
            run = TrainingRun(data_dir, checkpoint_dir, run_id, data_version, resume_from, replay)
            final = train(config, run, bar, progress_file=report)
        else:
            final = launch_local(config, data_dir, checkpoint_dir, run_id, data_version, resume_from, replay)
        if preemption.requested():  # SIGTERM after the last step: the run stops here, its last checkpoint named
            raise preemption.stopped()
    return final


def launch_with(
    config: FoundryConfig,
    data_dir: Path,
    checkpoint_dir: Path,
    run_id: str | None,
    data: DataVersion,
    replay: Replay | None = None,
) -> Path:
    """`launch` on this machine, or with `train.launcher: slurm` a job on a SLURM cluster
    (`foundry.training.slurm`), whose nodes hydrate `data` from its remote themselves: into the same
    `checkpoint_dir`, resuming the same way, the same `model.pt` returned."""
    if config.train.launcher == "slurm":
        from foundry.training.slurm import submit

        final = submit(config, checkpoint_dir, run_id, data, replay)
        check_replicas(checkpoint_dir, world_size(config))
        return final
    return launch(config, data_dir, checkpoint_dir, run_id, data.data_version, replay)
