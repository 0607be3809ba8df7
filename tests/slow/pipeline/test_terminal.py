"""What `foundry run` prints when nobody is watching a terminal (CI, a log file): each line once, no warning
the project could prevent, no advertisement, per-file drops at INFO and the drops by reason at the end of the
data stage, progress as plain periodic lines. On the default corpus (the whole standard library), where files
are dropped, with the tiny model and a few steps."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

import pytest
from conftest import REPO_ROOT
from helpers_configs import NO_BASELINES
from homes import seeded_home

PREFECT_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| (\w+)\s*\| (.*?) - (.*)$")
MLFLOW_LINE = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (\w+) ")

# Progress lines this often: several while the tiny model trains STEPS steps, and while the corpus is cleaned.
# 20 steps took 0.12 s on a quiet machine (one line while training, CI failed): 200 last over a second.
STEPS, EVERY_S = 200, 0.1


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> list[str]:
    from foundry.config import FoundryConfig

    tmp = tmp_path_factory.mktemp("terminal")
    result = subprocess.run(
        [sys.executable, "-m", "foundry.cli", "run", "--config", str(REPO_ROOT / "configs" / "tiny.yaml")]
        + ["--set", f"data.source={FoundryConfig().data.source}", "--set", f"train.max_steps={STEPS}"]
        + ["--set", f"train.progress_every_s={EVERY_S}", "--set", f"data.progress_every_s={EVERY_S}"]
        + ["--set", "registry.model_name=terminal-gpt"]
        # No training text before the holdout for the compression baselines: on the whole standard library the
        # default 16 MiB of it cost xz -9e and PPMd about 25 s, and this test reads the output, not the scores.
        + [arg for setting in NO_BASELINES for arg in ("--set", setting)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as a terminal interleaves them
        text=True,
        timeout=600,
        cwd=tmp,
        env={**os.environ, "FOUNDRY_HOME": str(seeded_home(tmp / "home"))},
    )
    (tmp / "output.txt").write_text(result.stdout)  # kept for reading when a test below fails
    assert result.returncode == 0, result.stdout[-3000:]
    return result.stdout.splitlines()


def _without_time(line: str) -> str:
    return re.sub(r"^(\d\d:\d\d:\d\d\.\d{3} \| |\d{4}/\d\d/\d\d \d\d:\d\d:\d\d )", "", line)


def test_no_line_is_printed_twice(output):
    lines = [_without_time(line) for line in output if line.strip()]
    repeated = [line for line, n in Counter(lines).items() if n > 1]
    assert repeated == []
    # The same message once through Prefect's formatter and once more by a library's own handler.
    messages = {m.group(3) for line in output if (m := PREFECT_LINE.match(line)) and len(m.group(3)) > 12}
    plain = [line for line in output if not PREFECT_LINE.match(line) and not MLFLOW_LINE.match(line)]
    doubled = [line for line in plain if any(line.endswith(message) for message in messages)]
    assert doubled == []


def test_no_warning_no_advert_no_wrong_model_summary(output):
    text = "\n".join(output)
    levels = {m.group(1) for line in output if (m := PREFECT_LINE.match(line) or MLFLOW_LINE.match(line))}
    assert "WARNING" not in levels and "Warning" not in text, [line for line in output if "WARN" in line.upper()]
    for noise in ("litlogger", "LeafSpec", "Total FLOPs", "💡", "`srun`"):  # srun: where SLURM is installed
        assert noise not in text


def test_drops_are_info_and_summed_up_by_reason(output):
    drops = [m for line in output if (m := PREFECT_LINE.match(line)) and m.group(3).startswith("dropped ")]
    assert drops and {m.group(1) for m in drops} == {"INFO"}
    summary = [line for line in output if "data: kept " in line and "dropped by reason:" in line]
    assert len(summary) == 1 and "dropped by reason: none" not in summary[0]


def _periodic(output: list[str], pattern: str) -> list[tuple[float, str]]:
    """(seconds of the day, message) of Prefect's lines whose message matches `pattern`."""
    found = []
    for line in output:
        if (m := PREFECT_LINE.match(line)) and re.match(pattern, m.group(3)):
            hours, minutes, seconds = line.split(" ", 1)[0].split(":")
            found.append((int(hours) * 3600 + int(minutes) * 60 + float(seconds), m.group(3)))
    return found


def _at_a_steady_rhythm(lines: list[tuple[float, str]]) -> None:
    """At least two lines before the last one, none sooner than the interval after the one before (the last,
    written when the work ended, may come sooner): a report each interval, not a burst at the end."""
    assert len(lines) >= 3, lines
    gaps = [later - earlier for (earlier, _), (later, _) in zip(lines, lines[1:-1])]
    assert min(gaps) >= EVERY_S * 0.9, list(zip(gaps, lines))


def test_training_progress_is_plain_periodic_lines(output):
    steps = _periodic(output, rf"step \d+/{STEPS} \(\d+%\)  loss")
    _at_a_steady_rhythm(steps)
    assert steps[-1][1].startswith(f"step {STEPS}/{STEPS} (100%)")
    assert sum(1 for _, message in steps if not message.startswith(f"step {STEPS}/")) >= 2  # while it trained
    assert not any("\r" in line or "━" in line for line in output)  # no bar drawn into a log
    assert output[-1].startswith("load it") or any(line.startswith("── Foundry pipeline finished") for line in output)


def test_preparation_progress_is_plain_periodic_lines(output):
    lines = _periodic(output, r"prepare: ")
    _at_a_steady_rhythm(lines)
    cleaning = [message for _, message in lines if message.startswith("prepare: cleaning, ")]
    assert len(cleaning) >= 2 and re.search(
        r"\d+/\d+ files cleaned \(\d+%\)  [\d,]+ documents  \d+ s left$", cleaning[-1]
    )
    files = [int(re.search(r"(\d+)/\d+ files", message).group(1)) for message in cleaning]
    assert files == sorted(files) and files[-1] > files[0]  # counted as it went
    assert re.match(r"prepare: done, (\d+)/\1 files cleaned \(100%\)", lines[-1][1]), lines[-1]
