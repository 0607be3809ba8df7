"""#55 point 2 through `foundry evaluate --data`: a source holding one `.jsonl` line nested past any stack is one
bad record under `data.on_error`, as in `foundry prepare` (tests/fast/data/test_hostile_records.py): skipped and
counted while the evaluation goes on, or the command stops with exit status 1 naming the file and line."""

from __future__ import annotations

import json

import pytest
from conftest import REPO_ROOT
from helpers_evaluate import random_model_files, register_files, word_soup_source
from synthetic import synthetic_docs

from foundry.cli import main
from foundry.config import load_config
from foundry.core import version_tags as tag
from foundry.runtime import tracking

pytestmark = pytest.mark.usefixtures("home")

TINY = str(REPO_ROOT / "configs" / "tiny.yaml")
NESTED = b'{"text": ' + b"[" * 200_000 + b"}\n"


@pytest.fixture
def hostile(tmp_path, tiny_dataset, home):
    """A registered uniform model and a word-soup source whose `records.jsonl` has the nested line second."""
    from tokenizers import Tokenizer

    config = load_config(TINY, ["evaluation.batch_size=4"])
    tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    model = register_files(config, "eval-hostile", random_model_files(config, tokenizer, home / "m", 0.0))
    source = word_soup_source(tmp_path / "tickets")
    good = [json.dumps({"text": text}).encode() + b"\n" for text in synthetic_docs(2, seed=11)]
    (source / "records.jsonl").write_bytes(good[0] + NESTED + good[1])
    return model, source


def evaluate(model: str, source, on_error: str, capsys) -> tuple[int, str, str]:
    args = ["--config", TINY, "--set", "evaluation.batch_size=4", "--set", f"data.on_error={on_error}"]
    code = main(["evaluate", model, "--data", str(source), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_nested_line_stops_the_evaluation_naming_file_and_line_under_fail(hostile, capsys):
    code, out, err = evaluate(*hostile, "fail", capsys)
    assert code == 1, err
    last = err.strip().splitlines()[-1]  # the command's own message, last on stderr
    assert last.startswith("foundry: evaluate failed (BadInputError): records.jsonl:2: malformed jsonl nested too deep")
    assert "| model |" not in out  # nothing scored


def test_a_nested_line_is_skipped_and_counted_under_skip(hostile, capsys, home):
    model, source = hostile
    code, out, err = evaluate(model, source, "skip", capsys)
    assert code == 0, err
    assert f"| {model} |" in out  # the evaluation went on and scored the model
    (run,) = tracking.client().search_runs(
        [e.experiment_id for e in tracking.client().search_experiments()],
        f"tags.`{tag.DATA_SOURCE}` = '{source}' and metrics.`data/docs_in` > 0",
    )
    counts = run.data.metrics
    assert counts["data/dropped_malformed_jsonl"] == 1
    assert counts["data/docs_in"] == 36 + 2  # the 36 files and the two good records around the bad one
