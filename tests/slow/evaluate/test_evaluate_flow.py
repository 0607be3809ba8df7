"""`foundry evaluate` through the evaluate flow under a real Prefect server: what the command prints is the run
page's summary, and the run page's comparison table holds the same rows. Two random-weight versions registered
without training, scored on a source in a temporary folder."""

from __future__ import annotations

import json
import re

from conftest import REPO_ROOT, run_page
from helpers_evaluate import random_model_files, register_files, word_soup_source
from helpers_tokenizers import plain_tokenizer

from foundry.config import load_config

SETTINGS = ["data.holdout_fraction=0.3", "evaluation.strong_context_bytes=4096", "evaluation.batch_size=4"]


def test_the_printed_comparison_is_the_run_pages_summary_and_table(prefect_harness, tmp_path, capsys):
    from foundry.cli import main

    config = load_config(REPO_ROOT / "configs" / "tiny.yaml", SETTINGS)
    uniform = register_files(config, "ev-flow-a", random_model_files(config, plain_tokenizer(), tmp_path / "a", 0.0))
    noisy = register_files(config, "ev-flow-b", random_model_files(config, plain_tokenizer(), tmp_path / "b", 5.0))
    source = word_soup_source(tmp_path / "tickets")
    settings = [arg for setting in SETTINGS for arg in ("--set", setting)]
    argv = ["evaluate", uniform, noisy, "--data", str(source), "--config", str(REPO_ROOT / "configs" / "tiny.yaml")]
    assert main([*argv, *settings]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out

    run_id = re.search(r"^evaluation run ([0-9a-f]{32})$", printed, re.M).group(1)
    flow_run, artifacts = run_page(run_id)
    assert flow_run.name == "evaluate-tickets"
    assert printed.strip() in artifacts["pipeline-summary"].data
    table = json.loads(artifacts["evaluation-comparison"].data)
    assert [row["model"] for row in table[:2]] == [uniform, noisy]  # the uniform model wins on word soup
    for row in table:  # one tokenizer: loss and perplexity compare, and the printed rows are the table's
        assert f"| {row['model']} | {row['bits_per_byte']} | {row['loss']} | {row['perplexity']} |" in printed
    groups = json.loads(artifacts["evaluation-groups"].data)  # per group: each model beside the group's baselines
    for row in groups:  # the printed rows are the table's
        assert list(row)[2:] == [uniform, noisy, "baseline: unigram", "baseline: gzip", "baseline: PPMd order 16"]
        assert f"| {' | '.join(row.values())} |" in printed
    assert {row["group"] for row in groups} == {"alpha", "beta", "(top level)"}

    assert main(["evaluate", uniform, "models:/ev-flow-b/9", "--data", str(source)]) == 1
    assert "models:/ev-flow-b/9: the registry has no such version or alias" in capsys.readouterr().err

    # #55 point 2 as the command reports it (the steps are tested in tests/fast/evaluate/test_hostile_evaluate_data.py)
    (source / "records.jsonl").write_bytes(b'{"text": "fine"}\n{"text": ' + b"[" * 200_000 + b"}\n")
    tiny = str(REPO_ROOT / "configs" / "tiny.yaml")
    assert main(["evaluate", uniform, "--data", str(source), "--config", tiny, "--set", "data.on_error=fail"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # the command's own message, last on stderr
    assert last.startswith("foundry: evaluate failed (BadInputError): records.jsonl:2: malformed jsonl nested too deep")
