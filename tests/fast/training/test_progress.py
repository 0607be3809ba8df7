"""Training progress as a person on a terminal sees it (the bar) and as the orchestrator reads it (the file)."""

from __future__ import annotations

import math
import re

from foundry.runtime.progress import write_report
from foundry.training.progress import Progress, read_progress


def test_a_line_says_steps_percent_loss_throughput_and_time_left():
    now = Progress(step=30, total=120, loss=4.25, tokens_per_sec=1234.5, elapsed_s=20.0, first_step=10)
    assert now.percent == 25.0 and now.seconds_left == 90.0
    assert now.line() == "step 30/120 (25%)  loss 4.2500  1,234 tokens/s  90 s left"
    start = Progress(step=10, total=120, loss=math.nan, tokens_per_sec=0.0, elapsed_s=1.0, first_step=10)
    assert start.seconds_left is None and start.line() == "step 10/120 (8%)  loss ?  0 tokens/s"
    images = Progress(step=4, total=8, loss=2.0, tokens_per_sec=812.0, elapsed_s=2.0, unit="images")
    assert images.line() == "step 4/8 (50%)  loss 2.0000  812 images/s  2 s left"


def test_the_file_is_whole_or_absent(tmp_path):
    path = tmp_path / "progress.json"
    assert read_progress(path) is None
    path.write_text('{"step": 3')  # what a reader would see of a file written in place, half done
    assert read_progress(path) is None
    now = Progress(step=5, total=10, loss=1.0, tokens_per_sec=2.0, elapsed_s=3.0)
    write_report(path, now)
    assert read_progress(path) == now and [p.name for p in tmp_path.iterdir()] == ["progress.json"]


def test_training_draws_a_bar_and_leaves_its_last_report(tiny_config, tiny_dataset, tmp_path, capsys):
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train

    steps = 10
    config = tiny_config.model_copy(update={"train": tiny_config.train.model_copy(update={"max_steps": steps})})
    train(config, TrainingRun(tiny_dataset, tmp_path / "ckpt"), progress=True, progress_file=tmp_path / "progress.json")
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()
    final = [line for line in bar if line.startswith("train: 100%")][-1]
    assert f"{steps}/{steps}" in final and re.search(r"loss \d+\.\d{4}, [\d,]+ tokens/s", final), final
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", final)  # elapsed < time left
    done = read_progress(tmp_path / "progress.json")
    assert done.step == done.total == steps and done.percent == 100.0 and not math.isnan(done.loss)


def test_preparation_says_its_step_files_documents_and_time_left(tmp_path):
    from foundry.data.progress import Preparation, PrepareProgress, read_preparation

    now = Preparation(step="cleaning", files=30, total=120, documents=4567, elapsed_s=10.0)
    assert now.line() == "prepare: cleaning, 30/120 files cleaned (25%)  4,567 documents  30 s left"
    later = Preparation(step="tokenizing", files=120, total=120, documents=9000, elapsed_s=40.0)
    assert later.line() == "prepare: tokenizing, 120/120 files cleaned (100%)  9,000 documents"

    path = tmp_path / "prepare-progress.json"
    counter = PrepareProgress(path, total=3, every_s=3600)
    counter.cleaned(1, 10)  # the first count is written at once, then not again within the interval
    counter.cleaned(1, 5)
    assert (read_preparation(path).files, read_preparation(path).documents) == (1, 10)
    counter.reached("de-duplicating", 3, 20)  # a new step is written at once
    done = read_preparation(path)
    assert (done.step, done.files, done.documents, done.percent) == ("de-duplicating", 3, 20, 100.0)
