"""#55 point 2 in `foundry evaluate --data`'s steps (foundry/evaluate/steps.py, run in this process as the flow
runs them): a source holding one `.jsonl` line nested past any stack is one bad record under `data.on_error`, as
in `foundry prepare` (tests/fast/data/test_hostile_records.py): skipped and counted while the evaluation goes on,
or the evaluation stops with a BadInputError naming the file and line. What the command prints for it (exit
status 1, that message last) is tested through the flow in tests/slow/evaluate/test_evaluate_flow.py."""

from __future__ import annotations

import json

import pytest
from conftest import REPO_ROOT
from helpers_evaluate import random_model_files, register_files, word_soup_source
from synthetic import synthetic_docs

from foundry.config import load_config
from foundry.core import version_tags as tag
from foundry.data.formats import BadInputError
from foundry.evaluate.scores import resolve_models, source_config
from foundry.evaluate.steps import evaluate_all
from foundry.runtime import tracking

pytestmark = pytest.mark.usefixtures("home")

TINY = REPO_ROOT / "configs" / "tiny.yaml"
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


def evaluate(model: str, source, on_error: str):
    """The evaluation of `model` on `source` under `data.on_error`, as the flow's steps run it."""
    config = source_config(load_config(TINY, ["evaluation.batch_size=4", f"data.on_error={on_error}"]), str(source))
    with tracking.pipeline_run(config, "evaluate hostile data", {"foundry.stage": "evaluate"}) as run:
        return evaluate_all(resolve_models([model]), str(source), config, run)


def test_a_nested_line_stops_the_evaluation_naming_file_and_line_under_fail(hostile):
    with pytest.raises(BadInputError, match=r"^records\.jsonl:2: malformed jsonl nested too deep"):
        evaluate(*hostile, "fail")


def test_a_nested_line_is_skipped_and_counted_under_skip(hostile):
    model, source = hostile
    evaluation = evaluate(model, source, "skip")
    assert [scores.model.model for scores in evaluation.models] == [model]  # the evaluation went on and scored it
    (logged,) = tracking.client().search_runs(
        [e.experiment_id for e in tracking.client().search_experiments()],
        f"tags.`{tag.DATA_SOURCE}` = '{source}' and metrics.`data/docs_in` > 0",
    )
    counts = logged.data.metrics
    assert counts["data/dropped_malformed_jsonl"] == 1
    assert counts["data/docs_in"] == 36 + 2  # the 36 files and the two good records around the bad one
