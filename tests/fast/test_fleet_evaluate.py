"""`foundry evaluate`'s logic (foundry/fleet/evaluate*.py) against the session's embedded MLflow registry: tiny
random-weight models registered through Foundry's own functions (no training), a source in a temporary folder and
the tiny data version. A uniform model (all logits 0) makes every figure exact: ln V nats a token."""

from __future__ import annotations

import math

import pytest
from conftest import REPO_ROOT, failing_mlflow_server
from helpers import files_under, plain_tokenizer, random_model_files, register_files, word_soup_source

from foundry import tracking
from foundry.config import load_config
from foundry.evaluation.compressors import compression_baselines
from foundry.evaluation.metrics import holdout_metrics
from foundry.fleet import evaluate_report
from foundry.fleet.evaluate import TOP_LEVEL, resolve_models, source_config
from foundry.fleet.evaluate_steps import evaluate_all
from models.gpt import load_gpt

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
    assert set(evaluation.baselines.scores) == {"unigram", "gzip", "xz", "xz9e", "ppmd"}

    # Different tokenizers: bits per byte only.
    text = evaluate_report.comparison(evaluation)
    assert not evaluation.one_tokenizer and evaluate_report.DIFFERENT_TOKENIZERS in text
    assert "| model | bits_per_byte | tokens |" in text and f"{uniform} (models:/eval-uniform@champion)" in text

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


def test_a_data_version_is_hydrated_and_scored_as_registration_scores_it(tiny_dataset, versioned, home):
    from tokenizers import Tokenizer

    data, _ = versioned
    config = small(f"data.remote={data.remote}", "evaluation.strong_context_bytes=4096")
    files = random_model_files(config, Tokenizer.from_file(str(tiny_dataset / "tokenizer.json")), home / "m", 1.0)
    model = register_files(config, "eval-versioned", files)
    with tracking.pipeline_run(config, "evaluate test", {"foundry.stage": "evaluate"}) as run:
        evaluation = evaluate_all(resolve_models([model]), data.data_version, config, run)

    e = config.evaluation
    (scores,) = evaluation.models
    recorded = holdout_metrics(load_gpt(files[0]), files[1], tiny_dataset, e.batch_size, e.max_tokens)
    assert (evaluation.data.data_version, evaluation.data.dir) == (
        data.data_version,
        home / "hydrated" / data.data_version,
    )
    assert scores.metrics.bits_per_byte == pytest.approx(recorded.bits_per_byte, rel=1e-6)
    expected = compression_baselines(tiny_dataset, e.compression_context_bytes, e.strong_context_bytes)
    assert evaluation.baselines.scores["ppmd"] == pytest.approx(expected["ppmd_bits_per_byte"])
    assert evaluation.baselines.scores["unigram"] == pytest.approx(recorded.unigram_bits_per_byte)
    text = evaluate_report.comparison(evaluation)
    assert "| model | bits_per_byte | loss | perplexity | tokens |" in text  # one tokenizer: loss compares
    linked = {m.key: m for m in tracking.client().get_logged_model(scores.model.model_id).metrics}
    assert linked["eval/bits_per_byte"].dataset_digest == data.data_version


def test_a_missing_version_is_an_error_not_nothing_to_evaluate(tiny_dataset, home):
    from tokenizers import Tokenizer

    config = small()
    files = random_model_files(config, Tokenizer.from_file(str(tiny_dataset / "tokenizer.json")), home / "m", 0.0)
    register_files(config, "eval-missing", files)
    with pytest.raises(LookupError, match=r"models:/eval-missing/99: the registry has no such version"):
        resolve_models(["models:/eval-missing/1", "models:/eval-missing/99"])
    with pytest.raises(LookupError, match=r"models:/never-registered@champion: the registry has no such"):
        resolve_models(["models:/never-registered@champion"])


def test_a_registry_that_does_not_answer_stops_the_evaluation(monkeypatch):
    from mlflow.exceptions import MlflowException

    with failing_mlflow_server(monkeypatch, "MLFLOW_TRACKING_URI"), pytest.raises(MlflowException):
        resolve_models(["models:/foundry-gpt@champion"])


def test_the_cli_refuses_a_malformed_model_uri_before_any_work(capsys):
    from foundry.cli import main

    assert main(["evaluate", "foundry-gpt/3", "--data", "stdlib://email"]) == 2
    assert "models:/NAME/VERSION" in capsys.readouterr().err


def test_the_evaluate_deployment_asks_for_models_data_and_the_config():
    from prefect.utilities.callables import parameter_schema

    from flows.deployments import DEPLOYMENTS
    from flows.evaluate import evaluate

    assert ("evaluate", "flows/evaluate.py:evaluate", True) in {
        (d.name, d.entrypoint, d.takes_config) for d in DEPLOYMENTS
    }
    schema = parameter_schema(evaluate).model_dump()
    assert list(schema["properties"]) == ["models", "data", "config"]
    assert schema["required"] == ["models", "data"]
