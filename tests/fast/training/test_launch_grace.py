"""foundry/training/launch.py `_grace_kept` replaces a private method of torch's elastic agent, so that a failed
group's ranks get SIGKILL SHUTDOWN_GRACE_S after SIGTERM, not torch's fixed 30 s (a preempted group's get the
preemption's grace, the agent's `shutdown_timeout`). The torch API it relies on is
checked here, on a real agent that starts no processes: a torch release that changes it fails this test rather
than leaving the patch quietly without effect. The timing itself, with processes:
tests/slow/training/test_train_processes.py `test_a_stuck_rank_ends_the_group_by_timeout_and_is_named`."""

from __future__ import annotations

import inspect
import signal

import pytest
from helpers_configs import tiny
from torch.distributed.elastic.agent.server.api import WorkerSpec
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.launcher.api import launch_agent

from foundry.training.launch import SHUTDOWN_GRACE_S, _grace_kept, launch_config


class ShutdownsRecorded(LocalElasticAgent):
    """The real agent, its `_shutdown` (which signals the ranks' processes, here none) recorded instead."""

    def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, timeout: int = 30) -> None:
        self.shutdowns.append((death_sig, timeout))


def agent(tmp_path) -> ShutdownsRecorded:
    """Built as `launch_agent` builds it from Foundry's LaunchConfig."""
    config = launch_config(tiny("train.num_nodes=2"), tmp_path)
    spec = WorkerSpec(role=config.role, local_world_size=config.nproc_per_node, rdzv_handler=None, entrypoint="x")
    built = ShutdownsRecorded(spec=spec, logs_specs=config.logs_specs, shutdown_timeout=config.shutdown_timeout)
    built.shutdowns = []
    return built


def test_the_agent_api_the_grace_patch_replaces_has_the_shape_it_expects(tmp_path):
    assert list(inspect.signature(LocalElasticAgent._stop_workers).parameters) == ["self", "worker_group"]
    assert {"death_sig", "timeout"} <= set(inspect.signature(LocalElasticAgent._shutdown).parameters)
    assert "shutdown_timeout=config.shutdown_timeout" in inspect.getsource(launch_agent)  # LaunchConfig's reaches it
    assert agent(tmp_path)._shutdown_timeout == 60  # a SIGTERM's (a preemption's) shutdown: train.preempt_grace_s
    unpatched = agent(tmp_path)
    unpatched._stop_workers(None)
    assert unpatched.shutdowns == [(signal.SIGTERM, 30)]  # torch's own: the 30 s the patch replaces


def test_under_the_patch_a_failed_group_is_stopped_with_the_grace_and_the_original_comes_back(tmp_path):
    original, patched = LocalElasticAgent._stop_workers, agent(tmp_path)
    with pytest.raises(RuntimeError, match="a launch failed"), _grace_kept():
        patched._stop_workers(None)
        assert patched.shutdowns == [(signal.SIGTERM, SHUTDOWN_GRACE_S)]
        raise RuntimeError("a launch failed")
    assert LocalElasticAgent._stop_workers is original
