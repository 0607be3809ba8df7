"""Documents scored by `foundry evaluate` (foundry/pretrain/scoring.py, group_baselines.py, report.py): per group of
source files, beside the compressors on each group's holdout, against the session's embedded MLflow registry with
tiny random-weight models registered through Foundry's own functions. A uniform model (all logits 0) makes every
figure exact: ln V nats a token."""

from __future__ import annotations

import math

import pytest
from conftest import REPO_ROOT
from helpers_evaluate import random_model_files, register_files, word_soup_source
from helpers_hostile import files_under
from helpers_tokenizers import plain_tokenizer

from foundry.config import load_config
from foundry.evaluate import report
from foundry.evaluate.scores import resolve_models, source_config
from foundry.evaluate.steps import evaluate_all
from foundry.pretrain.compressors import compression_baselines
from foundry.pretrain.group_baselines import TOP_LEVEL
from foundry.pretrain.report import DIFFERENT_TOKENIZERS
from foundry.runtime import tracking

pytestmark = pytest.mark.usefixtures("home")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Documents in two top-level folders and at the root of the source."""
    return word_soup_source(tmp_path_factory.mktemp("evaluate-source") / "tickets")


def small(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", ["evaluation.batch_size=4", *overrides])


def test_two_tokenizers_on_a_source_scored_per_group_linked_to_each_version(tiny_dataset, source, home):
    from tokenizers import Tokenizer

    config = small("data.holdout_fraction=0.3", "evaluation.strong_context_bytes=4096")
    data_tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    uniform = register_files(config, "eval-uniform", random_model_files(config, data_tokenizer, home / "uniform", 0.0))
    other = register_files(config, "eval-other", random_model_files(config, plain_tokenizer(), home / "other", 1.0))
    before = files_under(source)
    refs = resolve_models(["models:/eval-uniform@champion", other])
    config = source_config(config, str(source))
    with tracking.pipeline_run(config, "evaluate test", {"foundry.stage": "evaluate"}) as run:
        evaluation = evaluate_all(refs, str(source), config, run)

    first, second = evaluation.models
    assert (first.model.model, first.model.asked, second.model.model) == (uniform, refs[0].asked, other)
    vocab = data_tokenizer.get_vocab_size()
    assert first.metrics.loss == pytest.approx(math.log(vocab), abs=1e-4)
    assert set(evaluation.groups) == {"alpha", "beta", TOP_LEVEL}
    assert sum(g.bytes for g in first.groups.values()) == evaluation.holdout_bytes
    for g in first.groups.values():  # every token of the group scored, at ln V nats each
        assert g.loss == pytest.approx(math.log(vocab), abs=1e-4)
        assert g.bits_per_byte == pytest.approx(g.tokens * math.log(vocab) / math.log(2) / g.bytes, rel=1e-5)
    # zpaq -m4 by default (`evaluation.baselines`): scored, or named absent where the venv predates its pin
    asked = {"unigram", "gzip", "xz", "xz9e", "ppmd", "zpaq4"}
    assert set(evaluation.baselines.scores) | set(evaluation.baselines.absent) == asked
    assert not set(evaluation.baselines.scores) & set(evaluation.baselines.absent)

    # Different tokenizers: bits per byte only.
    text = report.comparison(evaluation)
    assert not evaluation.one_tokenizer and DIFFERENT_TOKENIZERS in text
    assert "| model | bits_per_byte | tokens |" in text and f"{uniform} (models:/eval-uniform@champion)" in text
    assert "(strongest baseline) |" in text and "\nstrongest baseline: " in text

    # No split ledger changed: nothing versioned, nothing hydrated, the staging folder gone, the source as it was.
    assert not (home / "workspace").exists() and not (home / "hydrated").exists()
    assert not (run.dir / "prepared").exists() and files_under(source) == before

    c = tracking.client()
    for scores in evaluation.models:
        child = c.get_run(scores.run_id)
        tags = child.data.tags
        assert (tags["mlflow.parentRunId"], tags["foundry.evaluates"]) == (evaluation.run_id, scores.model.model)
        assert (tags["foundry.model_uri"], tags["data.source_digest"]) == (
            scores.model.asked,
            evaluation.data.source_digest,
        )
        (dataset,) = child.inputs.dataset_inputs
        assert dataset.dataset.name == evaluation.data.name
        assert {t.key: t.value for t in dataset.tags}["mlflow.data.context"] == "evaluation"
        assert [m.model_id for m in child.inputs.model_inputs] == [scores.model.model_id]
        linked = {m.key: m for m in c.get_logged_model(scores.model.model_id).metrics}
        assert linked["eval/bits_per_byte"].value == pytest.approx(scores.metrics.bits_per_byte)
        assert linked["eval/bits_per_byte"].dataset_name == evaluation.data.name
        assert "eval/group/alpha/bits_per_byte" in linked
    logged = {a.path for a in c.list_artifacts(evaluation.run_id, "evaluation")}
    assert logged == {"evaluation/comparison.md", "evaluation/evaluation.png"}


def test_an_archive_served_over_http_is_prepared_and_scored_as_one_group(tiny_dataset, source, home, http_folder):
    """`--data URL`: a tar.gz served over http, its documents grouped under the archive, scored at ln V nats."""
    import tarfile

    from tokenizers import Tokenizer

    config = small("data.holdout_fraction=0.3", "evaluation.strong_context_bytes=4096")
    tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    model = register_files(config, "eval-http", random_model_files(config, tokenizer, home / "m", 0.0))
    folder, url = http_folder
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / "tickets.tar.gz", "w:gz") as archive:
        archive.add(source, arcname="tickets")
    config = source_config(config, f"{url}/tickets.tar.gz")
    with tracking.pipeline_run(config, "evaluate an archive", {"foundry.stage": "evaluate"}) as run:
        evaluation = evaluate_all(resolve_models([model]), f"{url}/tickets.tar.gz", config, run)
    (scores,) = evaluation.models
    assert scores.metrics.loss == pytest.approx(math.log(tokenizer.get_vocab_size()), abs=1e-4)
    assert set(evaluation.groups) == {"tickets"}
    assert scores.groups["tickets"].bytes == evaluation.holdout_bytes > 0
    assert evaluation.baselines.groups["tickets"]["ppmd"] == evaluation.baselines.scores["ppmd"]  # one group: all


def test_each_groups_baselines_are_the_compressors_on_its_holdout_alone_shown_beside_the_models(
    tiny_dataset, source, home
):
    """gzip and PPMd per group equal `compression_baselines` on a copy of the data whose holdout is that group's
    documents alone, with the same training text; the unigram per group adds up to the overall one; the group
    table and the MLflow runs (the evaluation's and each model's) carry them."""
    import json
    import os

    from tokenizers import Tokenizer

    from foundry.core.metrics.holdout import HoldoutMetrics
    from foundry.evaluate import steps
    from foundry.evaluate.scores import downloaded
    from foundry.pretrain.group_baselines import GROUP_BASELINES, group_of

    config = small("data.holdout_fraction=0.3", "evaluation.strong_context_bytes=4096")
    tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    model = register_files(config, "eval-groups", random_model_files(config, tokenizer, home / "m", 0.0))
    config = source_config(config, str(source))
    e = config.evaluation
    with tracking.pipeline_run(config, "evaluate per group", {"foundry.stage": "evaluate"}) as run:
        refs = [downloaded(ref, run.home) for ref in resolve_models([model])]
        data = steps.data_for(str(source), config, refs, run)
        base = steps.baselines(data, config)
        records = [json.loads(line) for line in (data.dir / "holdout.jsonl").read_text().splitlines()]
        direct, sizes = {}, {}
        for group in ("alpha", "beta", TOP_LEVEL):  # the group's holdout alone, beside the same train split
            alone = home / "alone" / group.strip("()").replace(" ", "-")
            alone.mkdir(parents=True)
            os.symlink(data.dir / "train.jsonl", alone / "train.jsonl")
            mine = [r for r in records if group_of(r["source"]) == group]
            (alone / "holdout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mine))
            direct[group] = compression_baselines(alone, e.compression_context_bytes, e.strong_context_bytes)
            sizes[group] = sum(len(r["text"].encode()) for r in mine)
        scores = [steps.scored_and_logged(ref, data, base, config, run) for ref in refs]
        evaluation = steps.compared(data, base, scores, run)

    assert set(base.groups) == {"alpha", "beta", TOP_LEVEL} and min(sizes.values()) > 0
    for group, found in direct.items():
        assert base.groups[group]["gzip"] == pytest.approx(found["gzip_bits_per_byte"], rel=1e-12)
        assert base.groups[group]["ppmd"] == pytest.approx(found["ppmd_bits_per_byte"], rel=1e-12)
    assert base.groups["alpha"]["ppmd"] != base.scores["ppmd"]  # scored on the group, not the whole holdout
    unigram_bits = sum(base.groups[g]["unigram"] * sizes[g] for g in sizes)
    assert unigram_bits == pytest.approx(base.scores["unigram"] * evaluation.holdout_bytes, rel=1e-9)

    text = report.comparison(evaluation)
    labels = [f"baseline: {HoldoutMetrics.LABELS[name]}" for name in GROUP_BASELINES]
    assert f"| group | bytes | {model} | {' | '.join(labels)} |" in text
    for group, found in base.groups.items():
        row = [f"{scores[0].groups[group].bits_per_byte:.4f}", *(f"{found[n]:.4f}" for n in GROUP_BASELINES)]
        assert f"| {group} | {sizes[group]:,} | {' | '.join(row)} |" in text

    c = tracking.client()
    for run_id in (evaluation.run_id, scores[0].run_id):
        logged = c.get_run(run_id).data.metrics
        assert logged["eval/group/beta/baseline/ppmd_bits_per_byte"] == pytest.approx(base.groups["beta"]["ppmd"])
        assert logged["eval/baseline/ppmd_bits_per_byte"] == pytest.approx(base.scores["ppmd"])
