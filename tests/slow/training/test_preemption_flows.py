"""Preemption of `foundry finetune` and `foundry align`, through the command line as a scheduler sends it: SIGTERM
mid-training writes a checkpoint and ends the command within `train.preempt_grace_s`, naming it, and the same command
run again resumes from it (its run's `resumed_from_step` is that checkpoint's step) and registers. `foundry run`:
tests/slow/training/test_preemption.py, whose approach this follows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
from conftest import REPO_ROOT
from helpers_configs import NO_BASELINES
from test_preemption import GRACE_S, descendants, terminated

from foundry.checkpointing.manifest import latest_valid
from foundry.core.run_tags import RESUMED_FROM_STEP
from foundry.runtime.preemption import EXIT_CODE

CHECKPOINTS = ("checkpoint.every_n_steps=10", f"train.preempt_grace_s={GRACE_S}", "train.progress_every_s=0.2")


def command(*args: str, settings: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "foundry.cli", *args, *[a for s in settings for a in ("--set", s)]]


def preempted_then_resumed(argv: list[str], home: Path, tmp_path: Path) -> tuple[int, str]:
    """`argv` started, SIGTERM once its train task reported a step; then `argv` again to the end. Returns the step
    of the checkpoint the first named and the second's stdout."""
    env = {**os.environ, "FOUNDRY_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    family: dict[int, psutil.Process] = {}
    try:
        seen = []
        for line in proc.stderr:  # the train task's progress lines: "step N/M ...", from "step 0/M"
            seen.append(line)
            descendants(proc.pid, family)
            if "Task run 'train" in line and (done := re.search(r" - step (\d+)/", line)) and int(done[1]) >= 1:
                break
        else:
            raise AssertionError(f"ended before training reported a step ({proc.wait()}): {''.join(seen)[-3000:]}")
        descendants(proc.pid, family)
        code, took, rest = terminated(proc, family)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == EXIT_CODE, rest[-3000:]
    assert took < GRACE_S + 5, took
    message = rest.strip().splitlines()[-1]
    assert message.startswith("foundry: preempted (SIGTERM): training stopped at step"), rest[-3000:]
    checkpoint = Path(message.split("checkpoint ")[1].split(";")[0])
    newest = latest_valid(checkpoint.parent)
    assert newest is not None and checkpoint.parent / newest.file == checkpoint and checkpoint.is_file()
    assert 0 < newest.step

    again = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    return newest.step, again.stdout


def resumed_from(stdout: str) -> str:
    """The `resumed_from_step` tag of the run a command's summary names."""
    from foundry.runtime import tracking

    (run_id,) = re.findall(r"MLflow run ([0-9a-f]{32})", stdout)
    return tracking.client().get_run(run_id).data.tags[RESUMED_FROM_STEP]


def test_sigterm_to_foundry_finetune_checkpoints_and_the_same_command_resumes(base_model, foundry_home, tmp_path):
    settings = (
        "data.source=stdlib://importlib",
        "finetune.model_name=it-gpt-preempted",
        "train.max_steps=60",
        "train.warmup_steps=2",
        "evaluation.max_regression=10",
        *NO_BASELINES,
        *CHECKPOINTS,
    )
    tiny = str(REPO_ROOT / "configs" / "tiny.yaml")
    argv = command("finetune", base_model[1].model_uri, "--config", tiny, settings=settings)
    step, stdout = preempted_then_resumed(argv, foundry_home, tmp_path)
    assert resumed_from(stdout) == str(step)
    assert step < 60


def test_sigterm_to_foundry_align_checkpoints_and_the_same_command_resumes(
    base_model, instruction_set, foundry_home, tmp_path
):
    settings = (
        "align.model_name=it-chat-preempted",
        f"data.source={instruction_set['sft'].parent}",
        "align.train.max_steps=60",
        "evaluation.max_regression=10",
        *CHECKPOINTS,
    )
    tiny_align = str(REPO_ROOT / "configs" / "tiny_align.yaml")
    argv = command("align", base_model[1].model_uri, "--config", tiny_align, settings=settings)
    step, stdout = preempted_then_resumed(argv, foundry_home, tmp_path)
    assert resumed_from(stdout) == str(step)
    assert step < 60


def test_sigterm_to_foundry_reproduce_stops_and_says_the_rerun_starts_over(base_model, foundry_home, tmp_path):
    """A reproduction trains from scratch on purpose: it stops at the next step, within the default grace (the
    recorded config is read after the signal is armed), names no checkpoint and registers nothing."""
    from foundry.cli.pipeline import REPRODUCE_RERUN
    from foundry.config import TrainConfig
    from foundry.runtime import tracking

    grace = TrainConfig.model_fields["preempt_grace_s"].default
    name = base_model[1].model_name
    versions = {v.version for v in tracking.client().search_model_versions(f"name='{name}'")}
    env = {**os.environ, "FOUNDRY_HOME": str(foundry_home), "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-m", "foundry.cli", "reproduce", base_model[1].model_uri, "--force"]  # a dirty tree too
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    family: dict[int, psutil.Process] = {}
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            descendants(proc.pid, family)
            if "Task run 'train" in line and (done := re.search(r" - step (\d+)/", line)) and int(done[1]) >= 1:
                break
        else:
            raise AssertionError(f"ended before training reported a step ({proc.wait()}): {''.join(seen)[-3000:]}")
        descendants(proc.pid, family)
        code, took, rest = terminated(proc, family)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == EXIT_CODE, rest[-3000:]
    assert took < grace + 5, took
    message = rest.strip().splitlines()[-1]
    assert re.fullmatch(rf"foundry: preempted \(SIGTERM\): stopped at step \d+; {REPRODUCE_RERUN}", message), message
    assert {v.version for v in tracking.client().search_model_versions(f"name='{name}'")} == versions
