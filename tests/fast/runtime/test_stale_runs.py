"""A failed or killed pipeline run ends FAILED in MLflow and leaves no staging folders (#30 point 8).

Against the embedded SQLite MLflow of the test home; the killed process is a real one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

import pytest

from foundry.config import load_config
from foundry.core import run_tags
from foundry.runtime import run_owner, tracking

KILLED = """
import os, sys
from foundry.runtime.env import configure_environment
configure_environment()
from foundry.runtime import tracking
from foundry.config import load_config
run_id = tracking.start_pipeline_run(load_config(None, [f"registry.experiment={sys.argv[1]}"]))
print(run_id, flush=True)
os.kill(os.getpid(), 9)
"""


@pytest.fixture
def config():
    return load_config(None, [f"registry.experiment=stale-{uuid.uuid4().hex[:8]}"])


def status(run_id: str) -> str:
    return tracking.client().get_run(run_id).info.status


def tagged_run(config, **tags: str) -> str:
    experiment = tracking.experiment_id(config.registry.experiment)
    return tracking.client().create_run(experiment, tags=tags).info.run_id


def test_a_killed_run_is_marked_failed_by_the_next_and_its_staging_removed(config, foundry_home):
    done = subprocess.run(
        [sys.executable, "-c", KILLED, config.registry.experiment], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == -9, done.stderr
    killed = done.stdout.strip()
    (foundry_home / "runs" / killed / "prepared").mkdir(parents=True)
    (foundry_home / "runs" / killed / "validation_report.json").write_text("{}")
    assert status(killed) == "RUNNING"
    tracking.start_pipeline_run(config)
    assert status(killed) == "FAILED"
    assert "ended without finishing the run" in tracking.client().get_run(killed).data.tags[run_tags.FAILURE]
    assert sorted(p.name for p in (foundry_home / "runs" / killed).iterdir()) == ["validation_report.json"]


def test_a_run_of_a_live_process_is_left_running(config):
    live = tracking.start_pipeline_run(config)
    tracking.start_pipeline_run(config)
    assert status(live) == "RUNNING"


def test_a_run_of_another_host_is_left_running(config):
    other = tagged_run(config, **{run_tags.HOST: f"not-{socket.gethostname()}", run_tags.PID: "4194304"})
    tracking.start_pipeline_run(config)
    assert status(other) == "RUNNING"


def test_a_run_without_owner_tags_is_left_running(config):
    unowned = tagged_run(config)
    tracking.start_pipeline_run(config)
    assert status(unowned) == "RUNNING"


def test_a_process_id_reused_by_another_process_counts_as_gone():
    tags = {run_tags.HOST: socket.gethostname(), run_tags.PID: str(os.getpid()), run_tags.STARTED: "1.0"}
    assert run_owner.owner_gone(tags)
    assert not run_owner.owner_gone(run_owner.owner_tags())


def test_a_failed_run_is_failed_and_keeps_its_reports_not_its_staging(config):
    with pytest.raises(RuntimeError, match="stage broke"):
        with tracking.pipeline_run(config, "failing", {}) as run:
            (run.dir / "prepared" / "shards").mkdir(parents=True)
            (run.dir / "validation_report.json").write_text("{}")
            raise RuntimeError("stage broke")
    assert status(run.run_id) == "FAILED"
    assert [p.name for p in run.dir.iterdir()] == ["validation_report.json"]
