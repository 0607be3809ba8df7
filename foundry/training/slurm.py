"""Training on a SLURM cluster (`train.launcher: slurm`): infra/slurm/train.sbatch submitted as it is, waited for.

    sbatch --nodes=<train.num_nodes> --wait --parsable --output=<checkpoints>/foundry-train-%j.out <train.sbatch_args>
        infra/slurm/train.sbatch <config.yaml> <data version> <DVC remote> [<MLflow run id>]

submitted from the checkout this module belongs to (its code is what the nodes run), with RUN_DIR, PYTHON (this
interpreter), DEVICES (`train.devices`) and MLFLOW_TRACKING_URI added to this process's environment, which the job
inherits (SLURM_CONF, AWS_* and PYTHONPATH with it). The script trains into `$RUN_DIR/checkpoints`: here a link to
the folder a local launch trains into (the attempt's), so resume, the progress file, the ranks' logs and `model.pt`
land where the train task looks for them. RUN_DIR itself, `<checkpoints>.slurm/` (the config and the link), goes when
the job ends. Each node hydrates the data version from its remote itself. A job that fails raises `TrainingFailed`
naming the job, its state and the end of its output file. Interrupted here (Ctrl-C, or SIGTERM to `foundry run`), the
job is cancelled with `scancel`: written for a preemption, not yet tested on the cluster.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from foundry.config import FoundryConfig, to_yaml
from foundry.core.contracts import DataVersion, Replay
from foundry.core.fs import remove_tree
from foundry.runtime import preemption
from foundry.runtime.env import PROJECT_ROOT
from foundry.training.failures import TrainingFailed

SBATCH = PROJECT_ROOT / "infra" / "slurm" / "train.sbatch"
OUTPUT_LINES = 30  # of the job's output file, in a failure's message
POLL_S = 1.0


@dataclass(frozen=True)
class Submission:
    """One job training `config` into `checkpoints` on `data`, logging to the MLflow run `run_id`."""

    config: FoundryConfig
    checkpoints: Path
    data: DataVersion
    run_id: str | None

    @property
    def run_dir(self) -> Path:
        """The script's RUN_DIR: beside the checkpoints, on the same storage, which every node must see."""
        return self.checkpoints.with_name(f"{self.checkpoints.name}.slurm")

    def output(self, job: str = "%j") -> Path:
        return self.checkpoints / f"foundry-train-{job}.out"

    def command(self) -> list[str]:
        t = self.config.train
        options = [f"--nodes={t.num_nodes}", "--wait", "--parsable", f"--output={self.output()}"]
        arguments = [str(self.run_dir / "config.yaml"), self.data.data_version, self.data.remote]
        return ["sbatch", *options, *shlex.split(t.sbatch_args), str(SBATCH), *arguments, *filter(None, [self.run_id])]

    def environment(self) -> dict[str, str]:
        import mlflow

        added = {"RUN_DIR": str(self.run_dir), "PYTHON": sys.executable, "DEVICES": str(self.config.train.devices)}
        if self.run_id:
            added["MLFLOW_TRACKING_URI"] = mlflow.get_tracking_uri()  # the server this process logs to
        return {**os.environ, **added}

    def prepare(self) -> None:
        """RUN_DIR with the config as YAML and `checkpoints`, a link to the attempt's folder."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(exist_ok=True)
        (self.run_dir / "config.yaml").write_text(to_yaml(self.config))
        link = self.run_dir / "checkpoints"
        if not link.is_symlink():
            link.symlink_to(Path("..") / self.checkpoints.name)


def submit(
    config: FoundryConfig, checkpoint_dir: Path, run_id: str | None, data: DataVersion, replay: Replay | None = None
) -> Path:
    """Train into `checkpoint_dir` on the cluster, resuming from its newest intact checkpoint; wait; `model.pt`.
    The ranks' weight digests are left in `checkpoint_dir` for the launcher's replica check."""
    refuse(replay)
    job = Submission(config, checkpoint_dir, data, run_id)
    for stale in checkpoint_dir.glob("weights.rank*.sha256"):  # a digest left by an earlier try proves nothing
        stale.unlink()
    job.prepare()
    try:
        run_job(job)
    finally:
        remove_tree(job.run_dir, within=job.run_dir.parent)
    return checkpoint_dir / "model.pt"


def refuse(replay: Replay | None) -> None:
    """What the script cannot do, said before anything is submitted."""
    if replay is not None:
        raise ValueError(
            "train.launcher slurm: infra/slurm/train.sbatch passes no replayed pretraining data to its ranks; "
            "set align.replay_fraction: 0 or train.launcher: local"
        )
    if shutil.which("sbatch") is None:
        raise ValueError(
            "train.launcher is slurm but sbatch is not on PATH: install SLURM's client commands, or set "
            "train.launcher: local"
        )
    if not SBATCH.is_file():
        raise ValueError(f"train.launcher slurm submits {SBATCH}, which is missing: run from a Foundry checkout")


def run_job(job: Submission) -> None:
    """Submit and wait; a preemption or an interruption of this process cancels the job."""
    errors, env = job.run_dir / "sbatch.err", job.environment()
    with preemption.training(job.checkpoints), open(errors, "w") as stderr:
        process = subprocess.Popen(
            job.command(), cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
        job_id = ""
        try:
            job_id = process.stdout.readline().strip().split(";")[0]  # --parsable: the id, as soon as it is queued
            while process.poll() is None and not preemption.requested():
                time.sleep(POLL_S)
        finally:
            if process.poll() is None:  # interrupted or preempted: the job must not outlive this run
                cancel(job_id, env)
                process.kill()
                process.wait()
        if preemption.requested():
            raise preemption.stopped()
    if process.returncode:
        raise TrainingFailed(failure(job, job_id, errors.read_text().strip()))


def cancel(job_id: str, env: dict[str, str]) -> None:
    if job_id:
        subprocess.run(["scancel", job_id], env=env, capture_output=True, timeout=60)


def failure(job: Submission, job_id: str, sbatch_errors: str) -> str:
    if not job_id:
        return f"sbatch refused the job ({shlex.join(job.command())}): {sbatch_errors}"
    output = job.output(job_id)
    tail = output.read_text(errors="replace").splitlines()[-OUTPUT_LINES:] if output.is_file() else ["(none written)"]
    return (
        f"SLURM job {job_id} {job_state(job_id, job.environment())}; the end of its output {output}:\n"
        + "\n".join(tail)
        + (f"\nsbatch: {sbatch_errors}" if sbatch_errors else "")
    )


def job_state(job_id: str, env: dict[str, str]) -> str:
    """`ended FAILED (exit code 1:0, reason ...)` as scontrol remembers it (MinJobAge, 5 minutes by default), else
    as accounting recorded it (sacct), else unknown."""
    shown = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True, timeout=60)
    fields = dict(re.findall(r"(JobState|Reason|ExitCode)=(\S+)", shown.stdout))
    if "JobState" in fields:
        return f"ended {fields['JobState']} (exit code {fields.get('ExitCode', '?')}, {fields.get('Reason', '')})"
    sacct = ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode"]
    if shutil.which("sacct"):
        recorded = subprocess.run(sacct, env=env, capture_output=True, text=True, timeout=60).stdout.split()
        if recorded and "|" in recorded[0]:
            state, code = recorded[0].split("|", 1)
            return f"ended {state} (exit code {code})"
    return "ended in a state neither scontrol nor sacct knows"
