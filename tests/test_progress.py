"""Training progress as a person on a terminal sees it (the bar) and as the orchestrator reads it (the file)."""

from __future__ import annotations

import math
import re

from foundry.training.progress import Progress, read_progress, write_progress


def test_a_line_says_steps_percent_loss_throughput_and_time_left():
    now = Progress(step=30, total=120, loss=4.25, tokens_per_sec=1234.5, elapsed_s=20.0, first_step=10)
    assert now.percent == 25.0 and now.seconds_left == 90.0
    assert now.line() == "step 30/120 (25%)  loss 4.2500  1,234 tokens/s  90 s left"
    start = Progress(step=10, total=120, loss=math.nan, tokens_per_sec=0.0, elapsed_s=1.0, first_step=10)
    assert start.seconds_left is None and start.line() == "step 10/120 (8%)  loss ?  0 tokens/s"


def test_the_file_is_whole_or_absent(tmp_path):
    path = tmp_path / "progress.json"
    assert read_progress(path) is None
    path.write_text('{"step": 3')  # what a reader would see of a file written in place, half done
    assert read_progress(path) is None
    now = Progress(step=5, total=10, loss=1.0, tokens_per_sec=2.0, elapsed_s=3.0)
    write_progress(path, now)
    assert read_progress(path) == now and [p.name for p in tmp_path.iterdir()] == ["progress.json"]


def test_training_draws_a_bar_and_leaves_its_last_report(tiny_config, tiny_dataset, tmp_path, capsys):
    from foundry.training.trainer import train

    steps = 10
    config = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(update={"max_steps": steps})})
    train(config, tiny_dataset, tmp_path / "ckpt", progress=True, progress_file=tmp_path / "progress.json")
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()
    final = [line for line in bar if line.startswith("train: 100%")][-1]
    assert f"{steps}/{steps}" in final and re.search(r"loss \d+\.\d{4}, [\d,]+ tokens/s", final), final
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", final)  # elapsed < time left
    done = read_progress(tmp_path / "progress.json")
    assert done.step == done.total == steps and done.percent == 100.0 and not math.isnan(done.loss)
